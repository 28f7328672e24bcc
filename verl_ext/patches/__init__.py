"""Runtime patches of verl 0.9.1 / vLLM 0.24 internals, written for speed (and two diagnostics).

Every patch is listed in ``verl_ext/patches/registry.py``: its switch and default, the verl / vLLM objects it replaces,
its measured effect with the evidence folder, its test and the versions it was written for. Nothing here is imported
by the plugins (envs/, games/, dataset.py, reward.py, mixture.py); ``PATCHES=off`` runs plain verl.
"""
