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


# logic.yaml's 2,000 zebra puzzles take minutes to generate on a CI core (the held-out split reads every training
# task's content, --max-samples or not); a smaller pool of the same cases shows that the file loads and exports
SMALLER_POOLS = {"logic": ["--set", "logic.num_tasks_per_case=12"]}


@pytest.mark.parametrize("name", ["games", "logic", "mixture"])
def test_shipped_example_configs_export(tmp_path, name):
    """data/*.yaml are the documented starting points; each must load and produce rows."""
    config = Path(__file__).resolve().parents[1] / "data" / f"{name}.yaml"
    out = tmp_path / f"{name}.parquet"
    assert export_main(["--config", str(config), *SMALLER_POOLS.get(name, []), "--max-samples", "4",
                        "--no-progress", "--out", str(out)]) == 0
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


def test_random_answers_are_legal_spread_and_reproducible(tmp_path):
    """--answers random: every answer a legal move (valid, scores >= the format share), not the engine's move
    everywhere, spread over the moves, and the same file from serial and parallel export."""
    from verl_ext.reward import compute_score

    args = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "openspiel.num_tasks_per_case=80",
            "--set", "openspiel.reward_mode=engine", "--format", "sft", "--answers", "random", "--no-progress"]
    serial, parallel = tmp_path / "serial.parquet", tmp_path / "parallel.parquet"
    assert export_main([*args, "--out", str(serial)]) == 0
    assert export_main([*args, "--jobs", "2", "--out", str(parallel)]) == 0
    assert serial.read_bytes() == parallel.read_bytes()
    rows = pq.read_table(serial).to_pylist()
    assert len(rows) == 160
    scores = [compute_score(r["data_source"], r["response"], "", r["extra_info"]) for r in rows]
    assert all(s["valid"] == 1.0 for s in scores)
    assert sum(s["score"] == 1.0 for s in scores) < 0.9 * len(rows)  # engine answers would all score 1
    connect_four = [r["response"] for r in rows if r["extra_info"]["case"] == "connect_four"]
    assert len(set(connect_four)) >= 5  # of 7 columns


def test_random_answers_refuse_what_has_no_legal_moves(tmp_path, capsys):
    out = tmp_path / "x.parquet"
    assert export_main([*ARGS, "--format", "sft", "--answers", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--answers random" in err and "mini_sudoku" in err
    assert not out.exists()
    assert export_main([*ARGS, "--answers", "random", "--out", str(out)]) == 2
    assert "applies to --format sft only" in capsys.readouterr().err
    # whole-game rows always have legal moves: a random one at every turn (tests/test_game_demonstrations.py)
    games = ["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "openspiel.task_mode=game", "--no-progress",
             "--set", "openspiel.num_tasks_per_case=2", "--format", "sft", "--answers", "random"]
    assert export_main([*games, "--out", str(out)]) == 0
