"""reasoning-gym entries generated in worker processes, for pools too slow to build on one core.

A zebra puzzle takes ~0.1 s to generate (docs/bench_envs.md), and the held-out split reads the content of every
training task (``verl_ext/held_out.py``): the default 2,000-task pool of ``logic-grpo.sh`` spent ~4 minutes of
start-up on zebra_puzzles alone, on one core. Entries are pure functions of (dataset, options, seed): reasoning-gym
seeds item ``i`` with ``seed + i``. So they can be made anywhere: each worker builds its own dataset object and
returns plain dicts. Workers are spawned, not forked, because the caller may be verl's driver, which holds Ray's
threads.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

# Below this estimated serial time a pool costs more than it saves (spawning and importing reasoning-gym take
# ~2-4 s a worker).
MIN_PARALLEL_SECONDS = 10.0
MAX_WORKERS = 16
# a worker gets several chunks, so that a slow chunk does not leave the others idle at the end
CHUNKS_PER_WORKER = 4

# Any item index works: reasoning-gym seeds item i with seed + i, so one dataset per case serves every task.
VIRTUAL_SIZE = 2**31 - 1

_worker_datasets: dict[tuple[str, str], Any] = {}


def create_dataset(name: str, options: dict[str, Any]) -> Any:
    """reasoning-gym dataset ``name`` with ``options`` as the logic env builds it, in its process or a worker's."""
    import reasoning_gym  # here, so game-only runs need no reasoning-gym (it imports all of its 100+ datasets)

    return reasoning_gym.create_dataset(name, seed=0, size=VIRTUAL_SIZE, **options)


def _entries_in_worker(name: str, options_json: str, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Entries ``seeds`` of reasoning-gym dataset ``name`` (built once per worker process)."""
    key = (name, options_json)
    if key not in _worker_datasets:
        _worker_datasets[key] = create_dataset(name, json.loads(options_json))
    dataset = _worker_datasets[key]
    return [dataset[seed] for seed in seeds]


def worker_count(requested: int, serial_seconds: float, items: int) -> int:
    """How many processes to use: ``requested`` when > 0, else (auto) 1 when the serial estimate is short,
    otherwise up to the CPU count (at most ``MAX_WORKERS``, and no more than one per 16 items)."""
    if requested > 0:
        return min(requested, max(1, items))
    if serial_seconds < MIN_PARALLEL_SECONDS:
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS, items // 16))


def generate_entries(name: str, options_json: str, seeds: Sequence[int],
                     workers: int) -> list[dict[str, Any]] | None:
    """Entries of ``seeds`` in order, made by ``workers`` spawned processes; None (with a warning) when the
    processes could not run, e.g. under a ``__main__`` that a spawned process cannot import (code fed on stdin)."""
    seeds = list(seeds)
    chunk = max(1, -(-len(seeds) // (workers * CHUNKS_PER_WORKER)))
    parts = [seeds[i:i + chunk] for i in range(0, len(seeds), chunk)]
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = pool.map(_entries_in_worker, [name] * len(parts), [options_json] * len(parts), parts)
            return [entry for part in results for entry in part]
    except (BrokenProcessPool, OSError) as err:
        warnings.warn(f"{name}: generating {len(seeds)} puzzles in {workers} worker processes failed ({err!r}); "
                      f"they are made one at a time instead (data.env.logic.generation_workers=1 skips the "
                      f"attempt)", RuntimeWarning, stacklevel=2)
        return None
