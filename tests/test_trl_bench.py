"""bench/speed/trl_grpo.py, the TRL peer of the speed benchmark, end to end on the CPU: TRL 1.16's GRPOTrainer with
transformers generation on a tiny model and our reward; the JSON that bench/speed/compare_speed.py reads.

TRL lives in its own folder (`make setup`: <venv>/trl-site), put on PYTHONPATH for the peer only, as on the GPU
machines (TRL_PYTHONPATH): importable beside verl, trl 1.16 breaks verl's model patching (Makefile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from verl_ext.export import build_rows, write_parquet
from verl_ext.mixture import EnvMixture
from verl_ext.tiny_model import build_qwen2

from bench_scripts import REPO, load_bench_script


TRL_SITE = Path(sys.prefix) / "trl-site"


def test_trl_stays_out_of_verls_environment():
    done = subprocess.run([sys.executable, "-c", "import trl"], capture_output=True, text=True)
    assert done.returncode != 0, "trl is importable beside verl: verl 0.9.1's model patching then fails (Makefile)"
    assert (TRL_SITE / "trl" / "__init__.py").is_file(), f"no TRL in {TRL_SITE}: run `make setup`"


def test_trl_peer_records_steps_timers_and_start_up(tmp_path, tokenizer_dir):
    model = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir)
    rows, _ = build_rows(EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 4}}),
                         "train", "rl", progress=False)
    write_parquet(rows, tmp_path / "train.parquet")
    out = tmp_path / "trl.json"
    launched = time.time()
    done = subprocess.run([sys.executable, "bench/speed/trl_grpo.py", "--model", str(model), "--data",
                           str(tmp_path / "train.parquet"), "--prompts", "2", "--samples", "2",
                           "--max-new-tokens", "8", "--micro-batch", "4", "--steps", "3",
                           "--generation", "transformers", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "PYTHONPATH": f"{TRL_SITE}{os.pathsep}{REPO}"})
    wall = time.time() - launched
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["trainer"] == "trl" and result["num_steps"] == 3 and "partial" not in result
    assert [row["step"] for row in result["steps"]] == [1, 2, 3]
    assert all(row["timing_s/step"] > 0 and "trl_timer_s/_prepare_inputs" in row for row in result["steps"])
    assert all(row["trl/completions/mean_length"] <= 8 for row in result["steps"])  # TRL's logs reach each row
    # start-up: the script's start to step 1 starting; the steps follow it inside the process's lifetime
    assert 0 < result["startup_s"] and result["startup_s"] + sum(r["timing_s/step"] for r in result["steps"]) < wall
    compare = load_bench_script("compare_speed")
    ours = {"steps": [{"timing_s/step": 9.0}, {"timing_s/step": 4.0}]}
    table = compare.table(ours, result, "2 x 2 x 8", None, {"launch_to_step1_start_s": 100.0})
    assert f"| start-up s (to step 1 started) | 100 | {compare.fmt(result['startup_s'])} |" in table
