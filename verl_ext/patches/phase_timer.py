"""Worker-side phase times of verl's actor update and weight sync, one line per step (a diagnostic).

verl's own ``timing_s/update_actor`` and ``timing_s/update_weights`` are taken in the trainer, around a Ray call:
they cannot say whether a slow update is the forward, the backward, the optimizer step or the call itself.
``install()`` wraps the functions of verl 0.9.1's engine worker that make up those two phases and, after each
``update_actor`` / ``update_weights`` call of the actor worker, prints one line

    [verl-ext] phase times update {"update_actor": {"s": 0.71, "calls": 1}, "forward_step": {...}, ...}

with inclusive wall times (a phase's time includes the phases inside it). When CUDA is in use each timed call
synchronizes the device at its start and end, so a phase holds its own GPU work and not the work queued before
it; that costs a few synchronizations per micro batch, so timings taken with it on are for the breakdown, not
for the headline step time. The line also counts the Python garbage collections of the worker since the previous
line (``gc_gen0`` .. ``gc_gen2``: time and number), which can stall any phase.

Load it in every process that imports verl with ``VERL_USE_EXTERNAL_MODULES=verl_ext.patches.phase_timer``
(the train scripts pass that variable to every Ray worker and keep the modules they add themselves);
``bench/profile/phase_times.py`` tabulates the lines of a console log. Importing this module changes nothing.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections import defaultdict
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.call_hooks import around_calls, timed_collections
from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

MARK = "[verl-ext] phase times"
WORKERS_MODULE = "verl.workers.engine_workers"
ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
VLLM_ROLLOUT_MODULE = "verl.workers.rollout.vllm_rollout.vllm_rollout"
SENDER_MODULE = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
_WRAPPED = "_verl_ext_phase_timer"

# ("Class.method" or "function" in the module, phase name[, report]): the two REPORTS methods print a line
ENGINE_PHASES = (
    ("FSDPEngine.forward_backward_batch", "forward_backward_batch"),
    ("FSDPEngineWithLMHead.forward_step", "forward_step"),
    ("FSDPEngineWithLMHead.prepare_model_inputs", "prepare_model_inputs"),
    ("FSDPEngineWithLMHead.prepare_model_outputs", "prepare_model_outputs"),
    ("FSDPEngine.optimizer_step", "optimizer_step"),
    ("FSDPEngine.optimizer_zero_grad", "optimizer_zero_grad"),
    ("FSDPEngine.lr_scheduler_step", "lr_scheduler_step"),
    ("FSDPEngine.get_per_tensor_param", "get_per_tensor_param"),
    ("prepare_micro_batches", "prepare_micro_batches"),
    ("postprocess_batch_func", "postprocess_batch_func"),
)
WORKER_PHASES = (
    ("TrainingWorker.train_mini_batch", "train_mini_batch"),
    ("TrainingWorker.train_batch", "train_batch"),
    ("TrainingWorker._postprocess_output", "postprocess_output"),
    ("set_expandable_segments", "set_expandable_segments"),
)
ROLLOUT_PHASES = (("ServerAdapter.update_weights", "rollout_update_weights"),)
SENDER_PHASES = (("BucketedWeightSender.async_send_weights", "send_weights"),)
REPORTS = (("ActorRolloutRefWorker.update_actor", "update_actor", "update"),
           ("ActorRolloutRefWorker.update_weights", "update_weights", "sync"))


class PhaseClock:
    """Inclusive wall time and call count per phase name, since the last report."""

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self.totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self.synchronize = synchronize
        self._on_gc = timed_collections(self._count_collection)

    def start(self) -> float:
        self._sync()
        return time.perf_counter()

    def stop(self, phase: str, started: float) -> None:
        self._sync()
        total = self.totals[phase]
        total[0] += time.perf_counter() - started
        total[1] += 1

    def report(self, kind: str) -> dict[str, dict[str, float]]:
        """Print this report's line, start the next one, and return what was printed."""
        times = {phase: {"s": round(seconds, 4), "calls": calls} for phase, (seconds, calls) in self.totals.items()}
        self.totals.clear()
        print(f"{MARK} {kind} {json.dumps(times)}", flush=True)
        return times

    def watch_gc(self) -> None:
        """Also count Python's garbage collections in this process, per generation (``gc_gen0`` .. ``gc_gen2``):
        everything collected since the last report, whichever phase (or the idle time between steps) it fell in."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def _count_collection(self, info: dict[str, int], seconds: float) -> None:
        total = self.totals[f"gc_gen{info.get('generation', '?')}"]
        total[0] += seconds
        total[1] += 1

    def _sync(self) -> None:
        if self.synchronize is not None:
            self.synchronize()


CLOCK = PhaseClock()


def timed(function: Callable[..., Any], phase: str, report: str = "", clock: PhaseClock = CLOCK) -> Callable[..., Any]:
    """``function`` (plain or async) timed under ``phase``; with ``report`` the clock prints after each call."""
    if getattr(function, _WRAPPED, False):
        return function

    def finish(started: float, returned: bool) -> None:  # also when the call raised
        clock.stop(phase, started)
        if report:
            clock.report(report)

    wrapper = around_calls(function, clock.start, finish)
    setattr(wrapper, _WRAPPED, True)
    return wrapper


def wrap_names(module: ModuleType, phases: tuple, clock: PhaseClock = CLOCK) -> list[str]:
    """Wrap each ``(dotted name, phase[, report])`` found in ``module``; return the names it lacks (kept as they are)."""
    missing = []
    for dotted, phase, *report in phases:
        owner, _, attr = dotted.rpartition(".")
        target = getattr(module, owner, None) if owner else module
        # the class's own attribute, not an inherited one: a subclass wrap must not time its parent's calls twice
        function = (target.__dict__.get(attr) if isinstance(target, type) else getattr(target, attr, None)) \
            if target is not None else None
        if function is None:
            missing.append(dotted)
            continue
        setattr(target, attr, timed(function, phase, report[0] if report else "", clock))
    return missing


def _cuda_synchronize() -> Callable[[], None] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def synchronize() -> None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    return synchronize


def _patch(module: ModuleType, phases: tuple) -> None:
    CLOCK.synchronize = _cuda_synchronize()
    missing = wrap_names(module, phases)
    if missing:
        print(f"{MARK}: {module.__name__} lacks {', '.join(missing)}; those phases are not timed", file=sys.stderr,
              flush=True)


def _patch_workers(module: ModuleType) -> None:
    _patch(module, WORKER_PHASES + REPORTS)
    CLOCK.watch_gc()
    torch_device = module.get_torch_device()  # verl's weight sync empties the allocator's cache through it
    if hasattr(torch_device, "empty_cache"):
        torch_device.empty_cache = timed(torch_device.empty_cache, "empty_cache")


def install() -> None:
    """Time verl's engine, engine-worker and vLLM weight-sync phases in this process once verl imports them."""
    after_import(ENGINE_MODULE, lambda module: _patch(module, ENGINE_PHASES))
    after_import(WORKERS_MODULE, _patch_workers)
    after_import(VLLM_ROLLOUT_MODULE, lambda module: _patch(module, ROLLOUT_PHASES))
    after_import(SENDER_MODULE, lambda module: _patch(module, SENDER_PHASES))


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
