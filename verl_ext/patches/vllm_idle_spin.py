"""vLLM's shared-memory queue readers stop busy-looping sooner after a read (``ROLLOUT_IDLE_SPIN_S``; not a default).

vLLM 0.24's GPU worker waits for its next command on a shared-memory ring buffer
(``vllm/distributed/device_communicators/shm_broadcast.py``, ``SpinCondition.wait``): for ``busy_loop_s`` = 1 s after
each read it spins (``sched_yield``), and only then sleeps on vLLM's own zmq notification, which a write wakes. At the
smoke load a step takes ~1.1-1.3 s, generation ~0.3-0.4 s of it, so vLLM's worker spins through the actor's whole
update and weight sync: 60-100 % of one core in the per-second monitor of ``docs/runs/2026-11-26-h100-smoke-levers/``,
while verl's update is itself bound by one CPU thread issuing ops. Whether that spinning slows the update on the lent
VMs (two vCPUs on one physical core) is what this switch lets a session measure; it is not a default until then.

The train scripts load this module through ``VERL_USE_EXTERNAL_MODULES`` and put the seconds into the job's
``runtime_env`` as ``VERL_EXT_VLLM_IDLE_SPIN_S``, which vLLM's engine core and GPU worker inherit. Each reader then
spins for that long after a read before it sleeps; only the first read after an idle spell waits for the
notification instead of finding the data while spinning.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import BY_MODULE, check

SHM_MODULE = "vllm.distributed.device_communicators.shm_broadcast"
ENV = "VERL_EXT_VLLM_IDLE_SPIN_S"
PATCHED = "_verl_ext_idle_spin"
MARK = "[verl-ext] vLLM idle spin"


def idle_spin_seconds(environ: Mapping[str, str] = os.environ) -> float | None:
    """The seconds ``VERL_EXT_VLLM_IDLE_SPIN_S`` sets (None when unset); a value that is not a number >= 0 raises."""
    given = environ.get(ENV, "").strip()
    if not given:
        return None
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise ValueError(f"{ENV} must be a number of seconds >= 0, got {given!r}")
    return seconds


def patch_spin_condition(module: ModuleType, seconds: float) -> bool:
    """Make the readers of ``module.SpinCondition`` busy-loop ``seconds`` after a read; False if vLLM lacks it."""
    condition = getattr(module, "SpinCondition", None)
    wait = getattr(condition, "wait", None)
    if wait is None:
        print(f"{MARK}: {module.__name__} has no SpinCondition.wait (not vLLM 0.24?); vLLM's spin is kept",
              file=sys.stderr, flush=True)
        return False
    if getattr(wait, PATCHED, False):
        return True

    @functools.wraps(wait)
    def shorter_spin_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "is_reader", False):
            self.busy_loop_s = seconds  # read at each wait, so readers built before this patch follow it too
        return wait(self, *args, **kwargs)

    setattr(shorter_spin_wait, PATCHED, True)
    condition.wait = shorter_spin_wait
    print(f"{MARK}: readers busy-loop {seconds:g} s after a read (vLLM's: 1 s)", file=sys.stderr, flush=True)
    return True


def install() -> None:
    """Patch vLLM's queue readers in this process when ``VERL_EXT_VLLM_IDLE_SPIN_S`` is set (now, or on import)."""
    seconds = idle_spin_seconds()
    if seconds is not None:
        after_import(SHM_MODULE, lambda module: patch_spin_condition(module, seconds))


check(BY_MODULE[__name__])  # refuses a vLLM / verl it was not written for, naming the switch
install()
