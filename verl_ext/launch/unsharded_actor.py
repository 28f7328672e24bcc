"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``ACTOR_FSDP=off``): verl's one-GPU LoRA actor is built as a plain
module, without FSDP units (``verl_ext.unsharded_actor``)."""

from verl_ext.unsharded_actor import install

install()
