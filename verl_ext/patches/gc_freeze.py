"""Freeze the Python heap that start-up built, so that full garbage collections stop walking it (``GC_FREEZE``).

Why: in every H100 smoke run of 2026-11-25 verl's ``update_actor`` took 0.4-0.6 s longer at step 3 and again at
steps 12-13 (inside the forward, by the phase timer), a period that fits Python's oldest-generation collection: it
runs once the objects promoted since the last one reach a quarter of the old generation, and it walks every tracked
object of the process. A process that imported verl's engine worker and built a 24-layer Qwen2 with LoRA holds
~557k of them; one such collection took 247 ms on the 2-core dev CPU (``bench/micro/gc_pause_bench.py``).
``gc.freeze()`` moves the objects that exist into a permanent generation that collections skip, as vLLM does in its
own engine core after start-up (vllm/v1/engine/core.py, ``freeze_gc_heap``). Frozen objects are still freed by
reference counting; only a reference cycle among them is never collected.

``install()`` freezes, in each process that imports verl:
  - at once: the modules imported so far (``freeze_start_up``, no collection first). vLLM and verl call
    ``gc.collect()`` themselves while they start (vLLM's memory profiling and graph capture: 13 full collections of
    0.40-0.46 s each in vLLM's GPU worker on the H100, 5.5 s of its start; docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q), and each walks every
    object the imports left. vLLM's GPU worker imports verl (so this module) when vLLM injects verl's worker
    extension, before it loads the model: its import-time freeze holds what it inherited from the engine core;
  - vLLM's GPU worker around its CUDA-graph memory profile and capture (``GPUModelRunner._freeze_gc``): vLLM
    collects, freezes, captures, then unfreezes everything and collects again, so each later collection walks
    the whole heap again, torch.compile's objects included (0.42-0.45 s each, seven of them before its first
    generation). Here the heap stays frozen after the capture; objects the capture made are still collected.
    Unless ``VLLM_ENABLE_CUDAGRAPH_GC=1``, with which vLLM does not freeze there either;
  - verl's actor worker, after it builds its model (``ActorRolloutRefWorker.init_model``) and after its first
    update (``update_actor``: the optimizer's state and compiled functions appear there);
  - the trainer's process when training begins (``on_train_begin`` of verl's v1 trainers).
Each freeze but the silent import-time one prints one line (``[verl-ext] gc freeze ...``) with the objects frozen.
Load it with ``VERL_USE_EXTERNAL_MODULES=verl_ext.patches.gc_freeze`` (the train scripts do unless ``GC_FREEZE=0``).

``watch_pauses()`` (also started by ``install()``; alone: ``GC_FREEZE=watch``) prints one line for each
collection of the process that takes ``PAUSE_LOG_S`` or longer (``[verl-ext] gc pause: generation 2, 0.312 s``);
Ray forwards it to the driver's console under the process's name, and ``bench/profile/gc_pauses.py`` tabulates them, so a
run shows which of its processes pause and how long.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.call_hooks import around_calls, timed_collections
from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

MARK = "[verl-ext] gc freeze"
WORKERS_MODULE = "verl.workers.engine_workers"
VLLM_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"  # vLLM 0.24: GPUModelRunner._freeze_gc around graph capture
# (module, class) whose own ``on_train_begin`` starts training: the sync trainer inherits the base class's, the
# two async trainers override it without calling it
TRAINERS = (
    ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer"),
    ("verl.trainer.ppo.v1.trainer_colocate_async", "PPOTrainerColocateAsync"),
    ("verl.trainer.ppo.v1.trainer_separate_async", "PPOTrainerSeparateAsync"),
)
_WRAPPED = "_verl_ext_gc_freeze"
PAUSE_MARK = "[verl-ext] gc pause"
PAUSE_LOG_S = 0.05  # a collection this long shows in a step's time (the smoke step is ~1 s)


def freeze_heap(reason: str) -> int:
    """Collect every generation, then freeze what is left; print and return the number of objects frozen."""
    started = time.perf_counter()
    watching = _on_collection in gc.callbacks
    if watching:  # these collections are the freeze's own, not pauses of the run
        gc.callbacks.remove(_on_collection)
    try:
        for generation in (0, 1, 2):  # vLLM's order: young objects are pushed down before the freeze
            gc.collect(generation)
        before = gc.get_freeze_count()
        gc.freeze()
    finally:
        if watching:
            gc.callbacks.append(_on_collection)
    frozen = gc.get_freeze_count() - before
    print(f"{MARK} after {reason}: {frozen:,} objects frozen ({gc.get_freeze_count():,} in all), "
          f"{time.perf_counter() - started:.2f} s", file=sys.stderr, flush=True)
    return frozen


def freeze_start_up(reason: str | None = None) -> int:
    """Freeze every object that exists now, without collecting first (``gc.freeze`` alone is cheap: it moves lists);
    print a line when given a ``reason``; return the number of objects frozen. A reference cycle that is already
    garbage stays in memory: at start-up these are few, and only CPU objects."""
    before = gc.get_freeze_count()
    gc.freeze()
    frozen = gc.get_freeze_count() - before
    if reason is not None:
        print(f"{MARK} at {reason}: {frozen:,} objects frozen", file=sys.stderr, flush=True)
    return frozen


def freeze_after(function: Callable[..., Any], reason: str, times: int | None = None) -> Callable[..., Any]:
    """``function`` (plain, async, or returning an awaitable) followed by ``freeze_heap(reason)``: after every call,
    or after the first ``times`` calls that return. Attributes such as verl's ``@register`` dispatch mode are kept."""
    if getattr(function, _WRAPPED, False):
        return function
    calls = {"left": times}

    def freeze(_: None, returned: bool) -> None:
        if returned and (calls["left"] is None or calls["left"] > 0):
            if calls["left"] is not None:
                calls["left"] -= 1
            freeze_heap(reason)

    wrapper = around_calls(function, lambda: None, freeze)
    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _wrap(owner: Any, attr: str, reason: str, times: int | None = None) -> bool:
    function = owner.__dict__.get(attr) if owner is not None else None
    if function is None:
        return False
    setattr(owner, attr, freeze_after(function, reason, times))
    return True


def _report_missing(module: ModuleType, names: list[str]) -> None:
    if names:
        print(f"{MARK}: {module.__name__} lacks {', '.join(names)}; no freeze there", file=sys.stderr, flush=True)


def _patch_workers(module: ModuleType) -> None:
    worker = getattr(module, "ActorRolloutRefWorker", None)
    missing = [f"ActorRolloutRefWorker.{attr}" for attr, reason, times in (
        ("init_model", "init_model", None), ("update_actor", "the first update_actor", 1),
    ) if not _wrap(worker, attr, reason, times)]
    _report_missing(module, missing)


def _patch_trainer(class_name: str) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        if not _wrap(getattr(module, class_name, None), "on_train_begin", "on_train_begin"):
            _report_missing(module, [f"{class_name}.on_train_begin"])
    return patch


@contextlib.contextmanager
def _capture_keeping_heap_frozen() -> Iterator[None]:
    """vLLM's ``GPUModelRunner._freeze_gc`` without its closing ``gc.unfreeze()``."""
    gc.collect()  # as vLLM: what the profile or capture can reuse is freed first
    freeze_start_up("vLLM's CUDA-graph capture")
    try:
        yield
    finally:
        gc.collect()  # the capture's own garbage (made after the freeze)


def _patch_vllm_capture(module: ModuleType) -> None:
    runner = getattr(module, "GPUModelRunner", None)
    entry = runner.__dict__.get("_freeze_gc") if runner is not None else None
    if not isinstance(entry, staticmethod):
        _report_missing(module, ["GPUModelRunner._freeze_gc (a staticmethod)"])
        return
    if os.environ.get("VLLM_ENABLE_CUDAGRAPH_GC", "0") not in ("", "0"):
        return  # vLLM neither freezes nor unfreezes there
    runner._freeze_gc = staticmethod(_capture_keeping_heap_frozen)


def _report_pause(info: dict[str, int], seconds: float) -> None:
    if seconds >= PAUSE_LOG_S:
        print(f"{PAUSE_MARK}: generation {info.get('generation', '?')}, {seconds:.3f} s, "
              f"{info.get('collected', 0):,} collected", file=sys.stderr, flush=True)


_on_collection = timed_collections(_report_pause)


def watch_pauses() -> None:
    """Print a line for each garbage collection of this process that takes ``PAUSE_LOG_S`` or longer (idempotent)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def install() -> None:
    """Freeze the heap at the points above in this process: now, and once verl or vLLM import the modules that hold
    the others; report long collections."""
    watch_pauses()
    freeze_start_up()
    after_import(VLLM_RUNNER_MODULE, _patch_vllm_capture)
    after_import(WORKERS_MODULE, _patch_workers)
    for module_name, class_name in TRAINERS:
        after_import(module_name, _patch_trainer(class_name))


def _apply() -> None:
    """GC_FREEZE=1: freeze and report; GC_FREEZE=watch (VERL_EXT_GC_FREEZE=watch): report without freezing."""
    if os.environ.get("VERL_EXT_GC_FREEZE") == "watch":
        watch_pauses()
    else:
        install()


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, _apply)
