"""bench/speed/paths_session.sh and bench/speed/paths_table.py: every path's command composes against verl 0.9.1 and passes
the pre-flight (the GPU-count check aside: this machine has none), unknown paths are named before anything
runs, and the table reads step times, merge verdicts and the two-GPU scaling efficiency."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from verl_ext.launch.preflight import check_ppo, compose

from bench_scripts import load_bench_script
from test_train_scripts import dry_run, overrides_of

REPO = Path(__file__).resolve().parents[1]
paths_table = load_bench_script("paths_table")
ALL = "fsdp1 full_ft sglang one_gpu dp2 tp2 dp2_full_ft"


def session(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "bench" / "speed" / "paths_session.sh"), *args], capture_output=True,
                          text=True, env={**os.environ, **env}, cwd=REPO)


def test_every_path_composes_and_passes_preflight():
    done = session("run", "--dry-run", PATHS=ALL, PATHS_DIR="/tmp/p")
    assert done.returncode == 0, done.stderr
    *commands, table = [shlex.split(line) for line in done.stdout.splitlines()]
    assert table[:2] == ["python3", "bench/speed/paths_table.py"] and table[3:5] == ["--paths", ALL]
    trains = {}
    for argv in commands:
        index = argv.index("bash")
        env = dict(item.split("=", 1) for item in argv[1:index])
        name = Path(env.pop("OUT")).name
        assert env.pop("WORK") == f"/tmp/p/{name}/work" and argv[index + 1] == "bench/device/gpu_smoke.sh"
        if argv[index + 2] == "train":
            trains[name] = env
    assert sorted(trains) == sorted(ALL.split())
    for name, env in trains.items():
        env = {k: v for k, v in env.items() if k not in ("MODEL_DIR", "CUDA_VISIBLE_DEVICES")}
        cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
        assert check_ppo(cfg, check_imports=False) == [], name
        if name in ("dp2", "tp2", "dp2_full_ft"):
            assert cfg.trainer.n_gpus_per_node == 2 and cfg.data.train_batch_size == 128
        assert (cfg.actor_rollout_ref.model.lora_rank == 0) == (name in ("full_ft", "dp2_full_ft")), name
    steps = [shlex.split(line)[-1] for line in done.stdout.splitlines() if "/sglang " in line or "sglang/work" in line]
    assert steps == ["train", "resume", "merge", "summary"]  # SGLang: checkpoint and resume from it


def test_unknown_path_is_named_before_anything_runs(tmp_path):
    done = session("run", PATHS="fsdp1 fsdp3", PATHS_DIR=str(tmp_path))
    assert done.returncode == 2 and "unknown path 'fsdp3'" in done.stderr
    assert not (tmp_path / "session.txt").exists()


def write_run(root: Path, name: str, rate: float, merge: str) -> None:
    where = root / name
    where.mkdir(parents=True)
    steps = [{"timing_s/step": 40.0, "generated_tokens_per_s_of_step": rate / 2},
             {"timing_s/step": 20.0, "timing_s/gen": 12.0, "generated_tokens_per_s_of_step": rate}]
    (where / "summary.json").write_text(json.dumps({"steps": steps}))
    (where / "startup.json").write_text(json.dumps({"launch_to_step1_start_s": 280.0}))
    (where / "merge.log").write_text(merge)


def test_table_reads_times_merges_and_scaling(tmp_path):
    ok = ("verify: written model vs shards: max abs logit diff 0.000e+00 (<= 1e-04) OK\n"
          "verify: merged (fp32) vs base+adapter: max abs logit diff 2.1e-05 (<= 1e-04) OK\n"
          "verify: written merged model vs base+adapter: max abs logit diff 3.0e-03 (informational)\n")
    write_run(tmp_path, "one_gpu", 1000.0, ok)
    write_run(tmp_path, "dp2", 1700.0, ok)
    write_run(tmp_path, "dp2_full_ft", 1900.0, ok)
    write_run(tmp_path, "tp2", 1200.0, "merge-ppo: verification failed: written model vs shards: max abs logit "
                                       "diff 1.0e+00 (<= 1e-04) FAILED\n")
    out = tmp_path / "paths.md"
    assert paths_table.main([str(tmp_path), "--paths", "one_gpu dp2 tp2 fsdp1 dp2_full_ft", "--out", str(out)]) == 0
    rows = {r["path"]: r for r in json.loads(out.with_suffix(".json").read_text())}
    assert rows["dp2"]["scaling efficiency"] == pytest.approx(0.85)
    assert rows["one_gpu"]["scaling efficiency"] is None and rows["one_gpu"]["step s"] == 20.0
    # a full fine-tune on two GPUs has no one-GPU full fine-tune beside it: no efficiency against LoRA's one_gpu
    assert rows["dp2_full_ft"]["GPUs"] == 2 and rows["dp2_full_ft"]["scaling efficiency"] is None
    assert rows["one_gpu"]["merge-ppo --verify"] == "OK (2 checks)"
    assert rows["tp2"]["merge-ppo --verify"].startswith("FAILED: written model vs shards")
    assert rows["fsdp1"]["merge-ppo --verify"] == "not run" and "steps" not in rows["fsdp1"]
    assert "| dp2 | 2 | 2 | 20 | 12 |" in out.read_text()
