"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``LM_HEAD_POSITIONS=response``): verl's fused LM head computes the
log-probs only at the positions that predict response tokens (``verl_ext.response_logits``)."""

from verl_ext.response_logits import install

install()
