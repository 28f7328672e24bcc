"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``LOSS_RESPONSE_CUT=gather``): verl's PPO loss cuts the responses'
log-probs out of the packed forward with one gather on the device (``verl_ext.response_cut``)."""

from verl_ext.response_cut import install

install()
