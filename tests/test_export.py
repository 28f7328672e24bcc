"""The export CLI: verl RL rows and SFT rows, deterministic across processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl_ext.export import main as export_main

ARGS = ["--set", "openspiel.game_types=[tic_tac_toe,leduc_poker]", "--set", "openspiel.num_tasks_per_case=5",
        "--set", "logic.cases=[mini_sudoku]", "--set", "logic.num_tasks_per_case=3", "--no-progress"]


def _export_in_subprocess(out, *extra):
    code = "import sys; from verl_ext.export import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, *ARGS, *extra, "--out", str(out)], check=True,
                   capture_output=True, env={"PYTHONHASHSEED": "random", "PATH": "/usr/bin:/bin"})


def test_same_config_gives_byte_identical_parquet_in_two_processes(tmp_path):
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _export_in_subprocess(first)
    _export_in_subprocess(second)
    assert first.read_bytes() == second.read_bytes()


def test_rl_rows_are_verl_rows(tmp_path):
    out = tmp_path / "rl.parquet"
    assert export_main([*ARGS, "--split", "val", "--out", str(out)]) == 0
    table = pq.read_table(out).to_pylist()
    assert len(table) == 3 * 16
    row = table[0]
    assert row["prompt"][0]["role"] == "user" and "<answer>" in row["prompt"][0]["content"]
    assert row["extra_info"]["split"] == "val" and row["extra_info"]["task_id"] >= 1_000_000
    assert set(row["reward_model"]) == {"style", "ground_truth"}


def test_sft_rows_carry_a_reference_answer_that_scores_full(tmp_path):
    from verl_ext.reward import compute_score

    out = tmp_path / "sft.parquet"
    assert export_main([*ARGS, "--format", "sft", "--out", str(out)]) == 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 13
    for row in rows:
        assert row["response"].startswith("<answer>") and row["messages"][-1]["content"] == row["response"]
        assert compute_score(row["data_source"], row["response"], "", row["extra_info"])["score"] == 1.0


def test_bad_override_is_a_clear_error(tmp_path, capsys):
    assert export_main(["--set", "openspiel.reward_mode=win", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "reward_mode: unknown value 'win'" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("name", ["games", "logic", "mixture"])
def test_shipped_example_configs_export(tmp_path, name):
    """data/*.yaml are the documented starting points; each must load and produce rows."""
    config = Path(__file__).resolve().parents[1] / "data" / f"{name}.yaml"
    out = tmp_path / f"{name}.parquet"
    assert export_main(["--config", str(config), "--max-samples", "4", "--no-progress", "--out", str(out)]) == 0
    assert pq.read_table(out).num_rows == 4


def test_parallel_export_writes_the_same_rows(tmp_path):
    """--jobs splits the rows over forked processes; the file must not depend on it (several chunks here)."""
    args = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "openspiel.num_tasks_per_case=80",
            "--format", "sft", "--no-progress"]
    serial, parallel = tmp_path / "serial.parquet", tmp_path / "parallel.parquet"
    assert export_main([*args, "--out", str(serial)]) == 0
    assert export_main([*args, "--jobs", "3", "--out", str(parallel)]) == 0
    assert serial.read_bytes() == parallel.read_bytes()
    assert pq.read_table(parallel).num_rows == 160


def test_jobs_must_be_positive(tmp_path, capsys):
    assert export_main([*ARGS, "--jobs", "0", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
