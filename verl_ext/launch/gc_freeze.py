"""Loaded through ``VERL_USE_EXTERNAL_MODULES`` (``GC_FREEZE=1``, the default): freezes the Python heap that start-up
built in verl's actor worker and trainer, so that full garbage collections stop walking it (``verl_ext.gc_freeze``)."""

from verl_ext.gc_freeze import install

install()
