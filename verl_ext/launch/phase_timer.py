"""Loaded through ``VERL_USE_EXTERNAL_MODULES``: prints worker-side phase times of verl's actor update and weight
sync after each step (``verl_ext.phase_timer``)."""

from verl_ext.phase_timer import install

install()
