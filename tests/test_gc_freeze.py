"""GC_FREEZE: the heap start-up built is frozen in verl's actor worker and trainer (verl_ext/patches/gc_freeze.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench_scripts import load_bench_script
from test_train_scripts import dry_run, runtime_env_modules
from stand_ins import write_stand_in
from verl_ext.patches import gc_freeze

gc_pauses = load_bench_script("gc_pauses")

REPO = Path(__file__).resolve().parents[1]


def run_child(script: str, **env: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter (a freeze must not reach the test process's own heap)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env}, cwd=REPO)


def test_freeze_heap_takes_the_live_objects_out_of_collections_and_says_how_many():
    child = run_child("""
        import gc, json
        from verl_ext.patches.gc_freeze import freeze_heap
        kept = [[i] for i in range(50_000)]  # tracked containers that stay alive
        before = len(gc.get_objects())
        frozen = freeze_heap("the test's build")
        print(json.dumps({"before": before, "frozen": frozen, "left": len(gc.get_objects()),
                          "count": gc.get_freeze_count(), "kept": len(kept)}))
    """)
    assert child.returncode == 0, child.stderr
    facts = json.loads(child.stdout)
    assert facts["frozen"] == facts["count"] >= 50_000
    assert facts["left"] < 100 <= facts["before"] - facts["left"]  # collections now walk almost nothing
    assert f"[verl-ext] gc freeze after the test's build: {facts['frozen']:,} objects frozen" in child.stderr


def test_freeze_follows_plain_async_and_awaitable_calls_and_only_the_first_n(monkeypatch):
    frozen: list[str] = []
    monkeypatch.setattr(gc_freeze, "freeze_heap", frozen.append)

    def build(x):
        assert frozen == []  # the call itself runs before the freeze
        return x + 1

    async def update(x):
        return x * 2

    async def later(x):
        return x - 1

    def awaitable(x):  # an async method behind a plain decorator (as torch.no_grad leaves it)
        return later(x)

    build.dispatch_mode = "ONE_TO_ALL"  # verl's @register keeps its settings on the function
    wrapped = gc_freeze.freeze_after(build, "build")
    assert wrapped(1) == 2 and frozen == ["build"]
    assert wrapped.dispatch_mode == "ONE_TO_ALL" and wrapped.__wrapped__ is build
    assert gc_freeze.freeze_after(wrapped, "again") is wrapped  # wrapped once

    first_only = gc_freeze.freeze_after(update, "the first update", times=1)
    assert asyncio.run(first_only(3)) == 6 and asyncio.run(first_only(4)) == 8
    assert frozen == ["build", "the first update"]

    after_await = gc_freeze.freeze_after(awaitable, "awaited")
    pending = after_await(5)
    assert frozen == ["build", "the first update"]  # not before the awaitable is done
    assert asyncio.run(pending) == 4 and frozen[-1] == "awaited"


def test_a_failing_call_does_not_freeze(monkeypatch):
    frozen: list[str] = []
    monkeypatch.setattr(gc_freeze, "freeze_heap", frozen.append)

    def broken():
        raise RuntimeError("model build failed")

    with pytest.raises(RuntimeError, match="model build failed"):
        gc_freeze.freeze_after(broken, "build")()
    assert frozen == []


@pytest.mark.slow
def test_verls_worker_and_trainers_freeze_through_verl_use_external_modules():
    # as in every process of a run: `import verl` imports the module, whose patches wait for verl's own modules
    child = run_child("""
        import gc, json, types
        import verl
        from verl.single_controller.base.decorator import MAGIC_ATTR
        from verl.workers.engine_workers import ActorRolloutRefWorker
        from verl.trainer.ppo.v1 import trainer_base, trainer_colocate_async, trainer_separate_async, trainer_sync
        from verl_ext.patches.gc_freeze import _WRAPPED

        init, update = ActorRolloutRefWorker.init_model, ActorRolloutRefWorker.update_actor
        facts = {
            "wrapped": [getattr(f, _WRAPPED, False) for f in (init, update, trainer_base.PPOTrainer.on_train_begin,
                        trainer_colocate_async.PPOTrainerColocateAsync.on_train_begin,
                        trainer_separate_async.PPOTrainerSeparateAsync.on_train_begin)],
            # verl's dispatch settings (@register) survive: the worker group still finds the methods
            "register": [getattr(f, MAGIC_ATTR) == getattr(f.__wrapped__, MAGIC_ATTR) for f in (init, update)],
        }
        # verl's colocated worker group binds the methods it finds by their dispatch settings, sync or async
        from verl.single_controller.ray.base import _bind_workers_method_to_parent
        import inspect
        fused = type("WorkerDict", (), {})
        _bind_workers_method_to_parent(fused, "actor_rollout", ActorRolloutRefWorker)
        bound = [getattr(fused, f"actor_rollout_{name}") for name in ("init_model", "update_actor")]
        facts["bound"] = [getattr(f, MAGIC_ATTR) == getattr(g, MAGIC_ATTR) and not inspect.iscoroutinefunction(f)
                          for f, g in zip(bound, (init, update))]
        trainer = object.__new__(trainer_sync.PPOTrainerSync)  # inherits the base class's on_train_begin
        trainer.on_train_begin()
        facts["after_train_begin"] = gc.get_freeze_count()
        worker = object.__new__(ActorRolloutRefWorker)
        worker.actor = types.SimpleNamespace(train_mini_batch=lambda data: None)
        worker.enable_routing_replay = False  # what init_model would have set
        for _ in range(2):
            ActorRolloutRefWorker.update_actor(worker, data=None)
        print(json.dumps(facts))
    """, VERL_USE_EXTERNAL_MODULES="verl_ext.patches.phase_timer,verl_ext.patches.gc_freeze")  # both wrap update_actor
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    assert facts["wrapped"] == [True] * 5 and facts["register"] == [True, True] and facts["bound"] == [True, True]
    assert facts["after_train_begin"] > 100_000  # verl's imports and more
    lines = [line for line in child.stderr.splitlines() if line.startswith(gc_freeze.MARK)]
    assert [line.split(":")[0] for line in lines] == [f"{gc_freeze.MARK} after on_train_begin",
                                                      f"{gc_freeze.MARK} after the first update_actor"], lines
    from verl_ext.patches.phase_timer import MARK as PHASE_MARK
    assert child.stdout.count(f"{PHASE_MARK} update ") + child.stderr.count(f"{PHASE_MARK} update ") == 2


def test_the_heap_verls_import_built_is_frozen_at_once_and_quietly():
    # vLLM's and verl's own gc.collect() calls during start-up then skip the imported modules
    child = run_child("""
        import gc, json, time
        import verl
        frozen = gc.get_freeze_count()
        started = time.perf_counter()
        gc.collect()
        print(json.dumps({"frozen": frozen, "collect_s": time.perf_counter() - started}))
    """, VERL_USE_EXTERNAL_MODULES="verl_ext.patches.gc_freeze")
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    assert facts["frozen"] > 100_000  # torch, verl.protocol and the rest that `import verl` brought in
    assert gc_freeze.MARK not in child.stderr  # one silent freeze per process, not a line from each Ray worker


RUNNER_STAND_IN = '''
"""Stand-in for vllm/v1/worker/gpu_model_runner.py (vLLM 0.24): GPUModelRunner._freeze_gc as vLLM writes it."""
import gc, os
from contextlib import contextmanager


class GPUModelRunner:
    @staticmethod
    @contextmanager
    def _freeze_gc():
        gc.collect()
        should_freeze = os.environ.get("VLLM_ENABLE_CUDAGRAPH_GC", "0") == "0"
        if should_freeze:
            gc.freeze()
        try:
            yield
        finally:
            if should_freeze:
                gc.unfreeze()
                gc.collect()
'''


@pytest.mark.parametrize("cudagraph_gc, kept_frozen", [("0", True), ("1", False)])
def test_vllms_graph_capture_leaves_the_heap_frozen(tmp_path, cudagraph_gc, kept_frozen):
    write_stand_in(tmp_path / "stand_in", gc_freeze.VLLM_RUNNER_MODULE, RUNNER_STAND_IN)
    child = run_child("""
        import gc, json
        import verl
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        compiled = [[n] for n in range(20_000)]  # what torch.compile leaves before the capture
        with GPUModelRunner._freeze_gc():
            captured = [[n] for n in range(100)]
            cycle = []
            cycle.append(cycle)  # garbage the capture makes
            del cycle
        frozen_after = gc.get_freeze_count()
        print(json.dumps({"frozen_after": frozen_after, "garbage_left": gc.collect()}))
    """, VERL_USE_EXTERNAL_MODULES="verl_ext.patches.gc_freeze", VLLM_ENABLE_CUDAGRAPH_GC=cudagraph_gc,
        PYTHONPATH=f"{tmp_path / 'stand_in'}{os.pathsep}{REPO}")
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    if kept_frozen:
        assert facts["garbage_left"] == 0  # the capture's cycle was collected on the way out
        assert facts["frozen_after"] > 100_000 + 20_000  # the import heap and what came before the capture
        assert f"{gc_freeze.MARK} at vLLM's CUDA-graph capture: " in child.stderr
    else:  # vLLM's own: no freeze there (and no collection on the way out); the import heap frozen stays
        assert gc_freeze.MARK not in child.stderr and facts["frozen_after"] > 100_000


def test_a_vllm_without_the_capture_freeze_is_left_alone_and_named(capsys):
    import types

    runner = types.ModuleType(gc_freeze.VLLM_RUNNER_MODULE)
    runner.GPUModelRunner = type("GPUModelRunner", (), {"_freeze_gc": lambda self: None})  # not a staticmethod
    gc_freeze._patch_vllm_capture(runner)
    assert runner.GPUModelRunner.__dict__["_freeze_gc"] is not gc_freeze._capture_keeping_heap_frozen
    assert "lacks GPUModelRunner._freeze_gc (a staticmethod); no freeze there" in capsys.readouterr().err


def test_a_verl_without_the_methods_is_left_alone_and_named(capsys):
    import types

    module = types.ModuleType("verl.workers.engine_workers")
    module.ActorRolloutRefWorker = type("ActorRolloutRefWorker", (), {"init_model": lambda self: None})
    gc_freeze._patch_workers(module)
    assert getattr(module.ActorRolloutRefWorker.init_model, gc_freeze._WRAPPED)
    assert "lacks ActorRolloutRefWorker.update_actor; no freeze there" in capsys.readouterr().err


def test_train_scripts_freeze_by_default_and_refuse_other_values():
    assert runtime_env_modules().split(",")[-1] == "verl_ext.patches.gc_freeze"
    assert "gc_freeze" not in (runtime_env_modules(GC_FREEZE="0") or "")
    # watch: the same module, told by the job's environment to report without freezing
    assert runtime_env_modules(GC_FREEZE="watch").split(",")[-1] == "verl_ext.patches.gc_freeze"
    watch = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", SIGNAL_CHECK="off", GC_FREEZE="watch")
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_GC_FREEZE=watch" in watch
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, "GC_FREEZE": "yes"})
    assert bad.returncode == 2 and "GC_FREEZE must be one of: 0 1 watch; got 'yes'" in bad.stderr


@pytest.mark.slow
def test_the_bench_counts_full_collections_with_and_without_the_freeze(tmp_path):
    out = tmp_path / "gc_pause.json"
    result = subprocess.run([sys.executable, str(REPO / "bench/micro/gc_pause_bench.py"), "--steps", "4", "--layers", "2",
                             "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = {row["mode"]: row for row in json.loads(out.read_text())["summary"]}
    none, frozen = summary["none"], summary["freeze"]
    assert none["frozen objects"] == 0 and none["tracked objects"] > 100_000
    assert frozen["frozen objects"] > 0.9 * none["tracked objects"] and frozen["tracked objects"] < 1_000
    assert "| full collections |" in result.stdout


def test_long_collections_are_reported_and_the_freezes_own_are_not():
    child = run_child("""
        import gc
        from verl_ext.patches import gc_freeze
        gc_freeze.PAUSE_LOG_S = 0.0  # report every collection
        gc_freeze.watch_pauses()
        gc_freeze.watch_pauses()  # once
        gc.collect(2)
        gc_freeze.freeze_heap("the test")  # its own three collections are not pauses of the run
        gc.collect(1)
        gc.callbacks.clear()  # not the interpreter's own collection at exit
    """)
    assert child.returncode == 0, child.stderr
    pauses = [line for line in child.stderr.splitlines() if line.startswith(gc_freeze.PAUSE_MARK)]
    assert [line.split(",")[0] for line in pauses] == [f"{gc_freeze.PAUSE_MARK}: generation 2",
                                                        f"{gc_freeze.PAUSE_MARK}: generation 1"], child.stderr


def test_gc_watch_alone_reports_without_freezing():
    child = run_child("""
        import gc, verl
        from verl_ext.patches import gc_freeze
        print(gc_freeze._on_collection in gc.callbacks, gc.get_freeze_count())
    """, VERL_USE_EXTERNAL_MODULES="verl_ext.patches.gc_freeze", VERL_EXT_GC_FREEZE="watch")  # GC_FREEZE=watch
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split()[-2:] == ["True", "0"]


def test_the_pause_table_counts_each_process_from_a_console_log(tmp_path):
    import gzip

    esc = "\x1b"
    log = tmp_path / "console.log.gz"
    with gzip.open(log, "wt") as out:
        out.write(f"12:00 | {esc}[36m(WorkerDict pid=2322){esc}[0m {gc_freeze.PAUSE_MARK}: generation 2, 0.412 s, 3 collected\n"
                  f"(AgentLoopWorkerTQ pid=77, ip=10.0.0.2) {gc_freeze.PAUSE_MARK}: generation 1, 0.060 s, 0 collected\n"
                  f"{gc_freeze.PAUSE_MARK}: generation 2, 0.100 s, 9 collected\n"
                  f"(WorkerDict pid=2322) {gc_freeze.PAUSE_MARK}: generation 2, 0.300 s, 1 collected\n"
                  "an unrelated line\n")
    pauses = gc_pauses.read_pauses(log)
    assert pauses == [("WorkerDict pid=2322", 2, 0.412), ("AgentLoopWorkerTQ pid=77", 1, 0.06), ("driver", 2, 0.1),
                      ("WorkerDict pid=2322", 2, 0.3)]
    text = gc_pauses.table(pauses)
    assert text.splitlines()[2] == "| WorkerDict pid=2322 | 2 | 2 | 0.712 | 0.412 |"
    assert "| (no pause" in gc_pauses.table([])
