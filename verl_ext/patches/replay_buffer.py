"""verl 0.9.1's v1 replay buffer with a configurable poll interval (``ROLLOUT_POLL_INTERVAL``, default 0.02 s).

Why: verl's v1 trainer times the rollout as ``timing_s/gen`` around ``ReplayBuffer.sample``
(verl/trainer/ppo/v1/trainer_base.py:565-575), which checks TransferQueue for finished prompt groups and,
while too few are finished, sleeps ``poll_interval`` seconds before looking again
(verl/trainer/ppo/v1/replay_buffer.py:408-409 ``_wait_for_next_poll``, called at :503). ``poll_interval``
defaults to 2.0 s (replay_buffer.py:144) and verl's trainer never passes one (trainer_base.py:155-161), so no
config key reaches it: every rollout phase ends on a 2 s grid (every ``timing_s/gen`` recorded on the H100 is
2k s + 0.05-0.24 s; docs/runs/speed-lab-notes/1-rollout-grid.md). The documented way to change the sampler is verl's custom-sampler hook
(``trainer.v1.sampler.custom_sampler.{path,name}``, trainer_base.py:145-152, called with
``sampler_kwargs``); this module is that hook:

    trainer.v1.sampler.custom_sampler.path=pkg://verl_ext.patches.replay_buffer
    trainer.v1.sampler.custom_sampler.name=poll_replay_buffer
    +trainer.v1.sampler.sampler_kwargs.poll_interval=0.02

It builds verl's own ``ReplayBuffer`` (sync trainer) or ``ReplayBufferAsync`` (async trainers) with that
interval; sampling, eviction and staleness rules are verl's, unchanged. One addition: each look lists every key in
TransferQueue (``tq.kv_list``: 3.0 ms for a realistic step's 1,152 keys on a dev CPU, ``bench/micro/poll_cost_bench.py``),
so the wait after a look is stretched to keep looking under ``LOOK_SHARE`` of the driver's time when a batch is
big enough to make a look slow (``poll_sleep_s``); at the measured loads the interval is what it says. verl hands a custom sampler only the
base arguments (trainer_base.py:155-162): DAPO group filtering (``algorithm.filter_groups``) and
``trainer.v1.sampler.sync_refill_failed_groups`` reach the built-in sampler only, so ``sampler_problems``
(run by the pre-flight) refuses them together with this sampler.
"""

from __future__ import annotations

import functools
import importlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

SAMPLER_PATH = "pkg://verl_ext.patches.replay_buffer"
SAMPLER_NAME = "poll_replay_buffer"
KWARGS_KEY = "trainer.v1.sampler.sampler_kwargs"
VERL_DEFAULT_POLL_S = 2.0  # verl/trainer/ppo/v1/replay_buffer.py:144
KNOWN_KWARGS = ("poll_interval",)
# At most this share of the driver's time goes to looks: a look of 3 ms (realistic load) keeps a 0.02 s interval
# (3 ms x 5.67 = 17 ms), a look of 30 ms (a batch ten times that size) waits 0.17 s
LOOK_SHARE = 0.15


def poll_sleep_s(poll_interval: float, last_look_s: float) -> float:
    """Seconds to sleep before the next look: ``poll_interval``, or longer when the last look took more than
    ``LOOK_SHARE`` of the look-and-sleep cycle."""
    return max(poll_interval, last_look_s * (1 - LOOK_SHARE) / LOOK_SHARE)


@functools.cache
def bounded_poll(buffer_class: type) -> type:
    """``buffer_class`` (verl's replay buffer) with its sleep between looks stretched by ``poll_sleep_s``."""

    class BoundedPoll(buffer_class):
        _last_look_s = 0.0

        def _sync_metadata_from_transfer_queue(self) -> Any:
            started = time.perf_counter()
            try:
                return super()._sync_metadata_from_transfer_queue()
            finally:
                self._last_look_s = time.perf_counter() - started

        def _wait_for_next_poll(self, partition_id: str, last_debug_time: float) -> float:
            interval = self.poll_interval
            self.poll_interval = poll_sleep_s(interval, self._last_look_s)
            try:
                return super()._wait_for_next_poll(partition_id, last_debug_time)
            finally:
                self.poll_interval = interval

    BoundedPoll.__name__ = BoundedPoll.__qualname__ = f"BoundedPoll{buffer_class.__name__}"
    return BoundedPoll


def parse_poll_interval(sampler_kwargs: Mapping[str, Any] | None) -> float:
    """The poll interval in seconds from ``sampler_kwargs``; ValueError naming the key for anything else."""
    kwargs = dict(sampler_kwargs or {})
    unknown = sorted(set(kwargs) - set(KNOWN_KWARGS))
    if unknown:
        raise ValueError(f"{KWARGS_KEY}.{unknown[0]}: not a setting of {SAMPLER_NAME} "
                         f"(known: {', '.join(KNOWN_KWARGS)})")
    if "poll_interval" not in kwargs:
        raise ValueError(f"{KWARGS_KEY}.poll_interval: missing; {SAMPLER_NAME} exists to set it "
                         f"(verl's built-in sampler polls every {VERL_DEFAULT_POLL_S:g} s)")
    raw = kwargs["poll_interval"]
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{KWARGS_KEY}.poll_interval: expected seconds as a number, got {raw!r}") from None
    if isinstance(raw, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{KWARGS_KEY}.poll_interval: expected a positive number of seconds, got {raw!r}")
    return value


def poll_replay_buffer(trainer_mode: str, trainer_config: Any, max_off_policy_threshold: int | None,
                       max_off_policy_strategy: str, sampler_kwargs: Mapping[str, Any] | None,
                       refill_fn: Callable[[int], int] | None = None) -> Any:
    """verl's replay buffer for ``trainer_mode`` polling every ``sampler_kwargs.poll_interval`` seconds.

    Called by verl's ``PPOTrainer._build_replay_buffer`` with exactly these keyword arguments.
    """
    poll_interval = parse_poll_interval(sampler_kwargs)
    verl_buffers = importlib.import_module("verl.trainer.ppo.v1.replay_buffer")
    cls = bounded_poll(verl_buffers.ReplayBuffer if trainer_mode == "sync" else verl_buffers.ReplayBufferAsync)
    return cls(trainer_mode=trainer_mode, trainer_config=trainer_config,
               max_off_policy_threshold=max_off_policy_threshold, max_off_policy_strategy=max_off_policy_strategy,
               sampler_kwargs=sampler_kwargs, poll_interval=poll_interval, refill_fn=refill_fn)


def uses_poll_sampler(cfg: Any) -> bool:
    """Whether a composed ``ppo_trainer`` config names this module as verl's custom sampler."""
    custom = cfg.trainer.v1.sampler.get("custom_sampler") or {}
    return custom.get("path") == SAMPLER_PATH and custom.get("name") == SAMPLER_NAME


def sampler_problems(cfg: Any) -> list[str]:
    """Why a composed config cannot run with this sampler (empty: it can, or the sampler is not used)."""
    if not uses_poll_sampler(cfg):
        return []
    problems = []
    try:
        parse_poll_interval(cfg.trainer.v1.sampler.get("sampler_kwargs"))
    except ValueError as err:
        problems.append(f"ROLLOUT_POLL_INTERVAL: {err}")
    filter_groups = cfg.algorithm.get("filter_groups") or {}
    if filter_groups.get("enable", False):
        problems.append(f"algorithm.filter_groups.enable=True: verl gives DAPO group filtering to its built-in "
                        f"sampler only, not to a custom one ({SAMPLER_NAME}); set ROLLOUT_POLL_INTERVAL=off")
    if cfg.trainer.v1.sampler.get("sync_refill_failed_groups", False):
        problems.append(f"trainer.v1.sampler.sync_refill_failed_groups=True: verl gives it to its built-in "
                        f"sampler only, not to a custom one ({SAMPLER_NAME}); set ROLLOUT_POLL_INTERVAL=off")
    return problems
