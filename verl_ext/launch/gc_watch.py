"""Loaded through ``VERL_USE_EXTERNAL_MODULES``: prints each garbage collection of the process that takes 0.05 s or
longer, without freezing anything (``verl_ext.gc_freeze.watch_pauses``; ``GC_FREEZE=1`` reports them too)."""

from verl_ext.gc_freeze import watch_pauses

watch_pauses()
