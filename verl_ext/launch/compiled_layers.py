"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``ACTOR_COMPILE=layers``): verl's FSDP2 engines compile their
decoder layers with ``torch.compile`` (``verl_ext.compiled_layers``)."""

from verl_ext.compiled_layers import install

install()
