"""reasoning-gym puzzles made in worker processes are the puzzles made in the process itself, and the training
plan does not depend on how they were made (verl_ext/envs/parallel_entries.py, LogicAdapter.prefetch)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from verl_ext.envs import parallel_entries
from verl_ext.envs.config import ConfigError
from verl_ext.envs.logic_env import DEFAULT_CASES, LogicAdapter, LogicConfig
from verl_ext.mixture import EnvMixture


def test_worker_count_is_requested_or_by_the_serial_estimate(monkeypatch):
    monkeypatch.setattr(parallel_entries.os, "cpu_count", lambda: 64)
    assert parallel_entries.worker_count(3, 0.0, 100) == 3  # asked for: no estimate needed
    assert parallel_entries.worker_count(8, 100.0, 2) == 2  # never more processes than puzzles
    assert parallel_entries.worker_count(0, 9.0, 5000) == 1  # short serially: no pool
    assert parallel_entries.worker_count(0, 400.0, 2200) == parallel_entries.MAX_WORKERS
    assert parallel_entries.worker_count(0, 400.0, 40) == 2  # one process per 16 puzzles at most


def test_a_worker_process_makes_the_same_puzzles_for_every_default_case():
    # one spawned process for every case (a pool costs ~2.5 s of imports): reasoning-gym seeds item i with seed + i,
    # so no generator may depend on process state
    serial = LogicAdapter(LogicConfig(generation_workers=1))
    seeds = [100, 101, 102]
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        made = list(pool.map(parallel_entries._entries_in_worker, DEFAULT_CASES,
                             [serial._options[case] for case in DEFAULT_CASES], [seeds] * len(DEFAULT_CASES)))
    for case, entries in zip(DEFAULT_CASES, made):
        assert entries == [serial._entry(case, seed) for seed in seeds], case


def test_prefetch_fills_the_cache_from_worker_processes():
    adapter = LogicAdapter(LogicConfig(cases=["knights_knaves"], generation_workers=2))
    assert adapter.prefetch("knights_knaves", range(40)) == 2
    assert all(("knights_knaves", seed) in adapter._entries for seed in range(40))


def test_a_serial_adapter_leaves_puzzles_to_be_made_on_access():
    adapter = LogicAdapter(LogicConfig(cases=["knights_knaves"], generation_workers=1))
    assert adapter.prefetch("knights_knaves", range(10)) == 1
    assert ("knights_knaves", 0) in adapter._entries and ("knights_knaves", 1) not in adapter._entries
    assert adapter.prefetch("knights_knaves", [0]) == 0  # nothing missing


def test_the_plan_is_the_same_with_worker_processes():
    def plan(workers: int):
        mixture = EnvMixture({"logic": {"cases": ["zebra_puzzles"], "num_tasks_per_case": 8,
                                        "generation_workers": workers}, "val_tasks_per_case": 2,
                              "held_out_share": 0.5})
        return mixture.plan("train"), mixture.plan("val")

    assert plan(2) == plan(1)


def test_a_pool_that_cannot_start_falls_back_to_one_process(monkeypatch):
    class Broken:
        def __init__(self, *args, **kwargs):
            raise BrokenProcessPool("no workers here")

    monkeypatch.setattr(parallel_entries, "ProcessPoolExecutor", Broken)
    adapter = LogicAdapter(LogicConfig(cases=["knights_knaves"], generation_workers=2))
    with pytest.warns(RuntimeWarning, match="generation_workers=1"):
        assert adapter.prefetch("knights_knaves", range(5)) == 1
    assert adapter.make_task("knights_knaves", 3, 3).messages  # still made, on access


@pytest.mark.parametrize(("value", "message"), [(-1, r"expected an integer >= 0 \(.*\)"), (1.5, "expected int"),
                                                (True, "expected int")])
def test_generation_workers_must_be_a_count(value, message):
    with pytest.raises(ConfigError, match=rf"data\.env\.logic\.generation_workers: {message}, got {value!r}"):
        EnvMixture({"logic": {"cases": ["knights_knaves"], "generation_workers": value}})
