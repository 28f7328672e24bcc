"""vLLM's engine core forks its GPU worker instead of spawning it (``ROLLOUT_WORKER_START=fork``).

verl 0.9.1 runs vLLM's server in a Ray actor. From there vLLM 0.24 must spawn its engine core process
(``vllm/utils/system_utils.py`` ``_maybe_force_spawn``: "In a Ray actor and can only be spawned") and writes
``VLLM_WORKER_MULTIPROC_METHOD=spawn`` into the actor's environment, which the engine core inherits. So the engine
core spawns its GPU worker too (verl's ``mp`` executor): one more fresh interpreter that imports Ray's worker
script (spawn's ``__mp_main__``), torch and vLLM before it does anything, alone on one core. On the lent H100s
the worker's process start took 18 s of a 140-150 s start-up (``bench/startup/startup_breakdown.py``: "vLLM engine core
starting" -> "vLLM GPU worker created"; docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m). The engine core is neither a Ray actor nor a process
that has touched CUDA, which is the case vLLM forks in by default (``VLLM_WORKER_MULTIPROC_METHOD`` defaults to
``fork``, ``vllm/envs.py``); forked, the worker starts with the engine core's modules already imported.

Importing this module arranges that, in any process that launches vLLM engine cores with ``spawn``
(``vllm.v1.engine.utils.CoreEngineProcManager``), the engine cores it starts see
``VLLM_WORKER_MULTIPROC_METHOD=fork``; the launching process's own variable is put back afterwards. vLLM keeps
its own check in the engine core: if CUDA were initialised there, it would still spawn. An explicit
``VLLM_WORKER_MULTIPROC_METHOD=spawn`` in the environment is left alone. The train scripts load this module in
every Ray worker with ``ROLLOUT_WORKER_START=fork`` through ``VERL_USE_EXTERNAL_MODULES``, which
``verl/__init__.py`` imports in each process that imports verl (the vLLM server actor does, before vLLM): the
patch waits for vLLM's module to be imported, so processes without vLLM pay nothing.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import BY_MODULE, check

ENGINE_UTILS = "vllm.v1.engine.utils"
START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
PATCHED = "_verl_ext_engine_cores_fork_workers"
FORK_MARK = "[verl-ext] vLLM engine core starts with VLLM_WORKER_MULTIPROC_METHOD=fork (ROLLOUT_WORKER_START=fork)"

_launch = threading.local()


def patch_engine_launch(engine_utils: ModuleType) -> bool:
    """Make the engine cores that ``engine_utils.CoreEngineProcManager`` spawns fork their own workers.

    Returns False (and changes nothing) when the module lacks what vLLM 0.24 has there.
    """
    if getattr(engine_utils, PATCHED, False):
        return True
    manager = getattr(engine_utils, "CoreEngineProcManager", None)
    original_context = getattr(engine_utils, "get_mp_context", None)
    if manager is None or original_context is None:
        print(f"[verl-ext] ROLLOUT_WORKER_START=fork: {ENGINE_UTILS} has no CoreEngineProcManager/get_mp_context "
              f"(not vLLM 0.24?); the engine core keeps vLLM's start method", file=sys.stderr, flush=True)
        return False
    engine_utils.get_mp_context = _context_forking_children(original_context)
    manager.__init__ = _restoring_environment(manager.__init__)
    setattr(engine_utils, PATCHED, True)
    return True


def _context_forking_children(get_mp_context: Callable[[], Any]) -> Callable[[], Any]:
    @functools.wraps(get_mp_context)
    def get_context() -> Any:
        requested = os.environ.get(START_METHOD)
        context = get_mp_context()  # vLLM writes "spawn" into the environment when it forces spawn here
        if getattr(_launch, "active", False) and context.get_start_method() == "spawn" and requested != "spawn":
            _launch.restore = os.environ.get(START_METHOD)
            os.environ[START_METHOD] = "fork"  # read by the engine core spawned next (spawn copies os.environ)
            print(FORK_MARK, flush=True)
        return context

    return get_context


def _restoring_environment(manager_init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(manager_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _launch.active, _launch.restore = True, None
        try:
            manager_init(self, *args, **kwargs)  # get_mp_context, then each engine core's proc.start()
        finally:
            _launch.active = False
            if _launch.restore is not None:
                os.environ[START_METHOD] = _launch.restore

    return __init__


def install() -> None:
    """Patch vLLM's engine launch now if it is imported, else as soon as it is."""
    after_import(ENGINE_UTILS, patch_engine_launch)


check(BY_MODULE[__name__])  # refuses a vLLM / verl it was not written for, naming the switch
install()
