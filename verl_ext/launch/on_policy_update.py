"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``OLD_LOG_PROB_PASS=auto``): installs ``verl_ext.on_policy_update``'s
patches of verl's trainer and PPO loss in this process; they apply when verl imports those modules."""

from verl_ext.on_policy_update import install

install()
