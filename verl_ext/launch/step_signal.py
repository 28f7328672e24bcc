"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (unless ``SIGNAL_CHECK=off``): installs ``verl_ext.step_signal``'s
per-step signal/collapse metrics and alarms in verl's v1 trainer; they apply when verl imports it."""

from verl_ext.step_signal import install

install()
