"""verl_ext.patches.phase_timer: worker-side phase times of verl's actor update, one line per step.

The engine test loads the timer as a run does (``VERL_USE_EXTERNAL_MODULES`` and verl's ``__init__``), runs verl
0.9.1's own ``forward_backward_batch`` on a tiny Qwen2 on one gloo CPU rank inside the actor worker's
``update_actor``, and reads the line it prints with ``bench/profile/phase_times.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

from bench_scripts import load_bench_script
from gloo_rank import CPU_ACTOR_ENGINE, free_port

from verl_ext.patches import phase_timer

phase_times = load_bench_script("phase_times")
TESTS = Path(__file__).parent


def test_timed_phases_are_inclusive_counted_synchronized_and_reported_once(capsys):
    synced = []
    clock = phase_timer.PhaseClock(synchronize=lambda: synced.append(1))

    inner = phase_timer.timed(lambda: sum(range(10_000)), "inner", clock=clock)

    async def sync_weights():
        await asyncio.sleep(0.01)

    def outer():
        inner()
        inner()

    phase_timer.timed(outer, "outer", report="update", clock=clock)()
    printed = capsys.readouterr().out
    assert printed.startswith(phase_timer.MARK + " update ")
    report = json.loads(printed.split(" update ", 1)[1])
    assert report["inner"]["calls"] == 2 and report["outer"]["calls"] == 1
    assert report["outer"]["s"] >= report["inner"]["s"] > 0
    assert len(synced) == 2 * 3  # start and stop of each timed call
    assert not clock.totals  # the report starts the next one

    asyncio.run(phase_timer.timed(sync_weights, "update_weights", report="sync", clock=clock)())
    report = json.loads(capsys.readouterr().out.split(" sync ", 1)[1])
    assert list(report) == ["update_weights"] and report["update_weights"]["s"] >= 0.01
    def behind_a_plain_decorator():  # verl's ServerAdapter.update_weights: async under @torch.no_grad()
        return sync_weights()

    asyncio.run(phase_timer.timed(behind_a_plain_decorator, "rollout", report="sync", clock=clock)())
    assert json.loads(capsys.readouterr().out.split(" sync ", 1)[1])["rollout"]["s"] >= 0.01
    wrapped = phase_timer.timed(outer, "outer", clock=clock)
    assert phase_timer.timed(wrapped, "again", clock=clock) is wrapped  # never timed twice


def test_names_a_verl_lacks_are_listed_and_left_alone():
    module = types.ModuleType("fake_verl")

    class Engine:
        def optimizer_step(self):
            return 1.0

    class LMHeadEngine(Engine):
        pass

    module.Engine, module.LMHeadEngine = Engine, LMHeadEngine
    clock = phase_timer.PhaseClock()
    missing = phase_timer.wrap_names(module, (("Engine.optimizer_step", "optimizer_step"),
                                              ("LMHeadEngine.optimizer_step", "inherited"),
                                              ("Engine.gone", "gone"), ("absent_function", "absent")), clock)
    assert missing == ["LMHeadEngine.optimizer_step", "Engine.gone", "absent_function"]
    assert LMHeadEngine().optimizer_step() == 1.0
    assert dict(clock.totals)["optimizer_step"][1] == 1 and "inherited" not in clock.totals


UPDATE_IN_VERL = ('import os\nos.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.phase_timer"\n'
                  + CPU_ACTOR_ENGINE + textwrap.dedent("""
    import verl.workers.engine_workers as engine_workers
    from test_train_scripts import dry_run, overrides_of

    smoke = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", OLD_LOG_PROB_PASS="always"))
    actor_config = omega_conf_to_dataclass(compose("ppo_trainer", smoke).actor_rollout_ref.actor)

    g = torch.Generator().manual_seed(3)
    lengths = [(4, 5), (6, 2), (3, 7), (5, 4)]
    seqs = [torch.randint(0, 64, (p + r,), generator=g) for p, r in lengths]
    data = ppo_micro_batch(seqs, lengths, [0.5] * len(lengths), 0.0, max_token_len_per_gpu=20,
                           calculate_entropy=False)

    def train_mini_batch(data):  # the worker's update: verl's micro batching, forward, loss and backward
        output = engine.forward_backward_batch(data, loss_function=functools.partial(losses.ppo_loss, config=actor_config))
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": output["metrics"]})

    worker = types.SimpleNamespace(actor=types.SimpleNamespace(train_mini_batch=train_mini_batch),
                                   enable_routing_replay=False)
    engine_workers.ActorRolloutRefWorker.update_actor(worker, data)  # prints the step's line
"""))


def test_verls_update_prints_one_line_with_its_phases_nested(tmp_path):
    done = subprocess.run([sys.executable, "-c", UPDATE_IN_VERL, str(TESTS), free_port()], capture_output=True,
                          text=True, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    console = tmp_path / "console.log"
    console.write_text("(WorkerDict pid=1) " + done.stdout)
    reports = phase_times.parse(console.read_text())
    assert list(reports) == ["update"] and len(reports["update"]) == 1
    update = reports["update"][0]
    micro_batches = update["forward_step"]["calls"]
    assert micro_batches == 2  # sequences of 9, 8, 10 and 9 tokens under a 20-token budget
    assert update["prepare_model_inputs"]["calls"] == update["prepare_model_outputs"]["calls"] == micro_batches
    assert update["update_actor"]["s"] >= update["forward_backward_batch"]["s"] >= update["forward_step"]["s"] > 0
    assert update["prepare_micro_batches"]["calls"] == update["postprocess_batch_func"]["calls"] == 1
    table = phase_times.table(reports["update"], skip=1)
    assert "| update_actor |" in table and "1 steps (of 1" in table  # one report: kept rather than left empty
    assert table.index("| update_actor |") < table.index("| forward_step |")  # longest first


def test_the_table_reads_gzip_logs_and_skips_warm_up_steps(tmp_path):
    import gzip

    lines = [f"(WorkerDict pid=7) {phase_timer.MARK} update " + json.dumps({"update_actor": {"s": s, "calls": 1}})
             for s in (5.0, 0.7, 0.8, 0.9)]
    lines.insert(2, f"(WorkerDict pid=7) {phase_timer.MARK} sync {{\"update_weights\": {{\"s\": 0.3, \"calls\": 1}}}}")
    lines.insert(3, f"{phase_timer.MARK} update {{\"cut")  # interleaved output: ignored
    path = tmp_path / "console.log.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(lines))
    out = tmp_path / "phases.md"
    assert phase_times.main([str(path), "--skip", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| update_actor | 0.8000 | 0.7000 | 0.9000 | 1 |" in text
    assert "## sync" in text and "3 steps (of 4" in text


def test_garbage_collections_are_counted_by_generation_until_the_report(capsys):
    import gc

    clock = phase_timer.PhaseClock()
    clock.watch_gc()
    clock.watch_gc()  # once only
    try:
        assert gc.callbacks.count(clock._on_gc) == 1
        gc.collect(2)
        gc.collect(0)
        report = clock.report("update")
    finally:
        gc.callbacks.remove(clock._on_gc)
    assert report["gc_gen2"]["calls"] >= 1 and report["gc_gen0"]["calls"] >= 1
    assert report["gc_gen2"]["s"] > 0
    assert json.loads(capsys.readouterr().out.split(" update ", 1)[1]) == report
