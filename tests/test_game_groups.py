"""bench/learning/game_groups.py: the share of a whole-game run's GRPO groups with differing rewards, per case and
opponent, from its sample log."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "learning"))

import game_groups  # noqa: E402


def row(step: int, case: str, opponent: str, seed: int, score: float, split: str = "train") -> str:
    return json.dumps({"split": split, "step": step, "case": case, "opponent": opponent, "seed": seed,
                       "score": score, "reply": "<answer>x3</answer>"})


def write_log(path: Path) -> Path:
    lines = [
        # step 1: one connect_four group all lost to MCTS (no signal), one against random with a win and a loss
        *(row(1, "connect_four", "mcts:50", 7, 0.0) for _ in range(4)),
        row(1, "connect_four", "random", 8, 1.0), row(1, "connect_four", "random", 8, 0.0),
        row(1, "connect_four", "random", 8, 1.0), row(1, "connect_four", "random", 8, 1.0),
        # step 12: a tic_tac_toe group with a draw among wins (signal); validation rows and junk are ignored
        row(12, "tic_tac_toe", "random", 9, 1.0), row(12, "tic_tac_toe", "random", 9, 0.5),
        row(12, "tic_tac_toe", "random", 9, 0.0, split="val"),
        "not json", json.dumps(["a", "list"]), json.dumps({"split": "train", "case": "tic_tac_toe"}),
    ]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_groups_with_signal_per_case_and_opponent(tmp_path):
    groups = game_groups.training_groups(write_log(tmp_path / "run.samples.jsonl.gz"))
    assert sorted(groups) == [(1, "connect_four", "mcts:50", 7), (1, "connect_four", "random", 8),
                              (12, "tic_tac_toe", "random", 9)]
    whole = game_groups.tally(groups, window=0)
    assert whole[("connect_four", "mcts:50", 0)].with_signal == 0
    assert whole[("connect_four", "random", 0)].with_signal == 1
    assert whole[("connect_four", "random", 0)].reward_sum / whole[("connect_four", "random", 0)].games == 0.75
    assert whole[("tic_tac_toe", "random", 0)].sizes == {2}  # the validation row is not part of the group
    windows = game_groups.tally(groups, window=10)
    assert set(windows) == {("connect_four", "mcts:50", 1), ("connect_four", "random", 1), ("tic_tac_toe", "random", 11)}
    text = game_groups.table(windows, window=10)
    assert "| connect_four | mcts:50 | 1-10 | 1 | 0 % [" in text and "| tic_tac_toe | random | 11-20 | 1 | 100 % [" in text


def test_cli_writes_markdown_and_json_and_refuses_a_log_without_training_rows(tmp_path, capsys):
    log = write_log(tmp_path / "run.samples.jsonl.gz")
    assert game_groups.main([str(log), "--out", str(tmp_path / "out" / "groups")]) == 0
    rows = json.loads((tmp_path / "out" / "groups.json").read_text())
    assert {(r["case"], r["opponent"], r["with_signal"], r["groups"]) for r in rows} == {
        ("connect_four", "mcts:50", 0, 1), ("connect_four", "random", 1, 1), ("tic_tac_toe", "random", 1, 1)}
    assert (tmp_path / "out" / "groups.md").read_text().startswith("| case | opponent |")
    empty = tmp_path / "empty.jsonl"
    empty.write_text(row(1, "tic_tac_toe", "random", 1, 1.0, split="val") + "\n")
    with pytest.raises(SystemExit):
        game_groups.main([str(empty)])
    assert "no training rows" in capsys.readouterr().err


def test_by_seat_splits_each_opponent_by_the_logged_seat_or_the_rows_parity(tmp_path):
    rows = [{"split": "train", "step": 1, "case": "tic_tac_toe", "opponent": "random", "seed": 5, "score": score,
             "seat": 1} for score in (1.0, 0.0)]
    rows += [{"split": "train", "step": 1, "case": "tic_tac_toe", "opponent": "random", "seed": 6, "score": 1.0,
              "index": 4} for _ in range(2)]  # a log before the seat field: the index's parity (seats alternated)
    rows.append({"split": "train", "step": 1, "case": "tic_tac_toe", "opponent": "random", "seed": 7, "score": 1.0})
    log = tmp_path / "run.samples.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tallies = game_groups.tally(game_groups.training_groups(log, by_seat=True), window=0)
    assert {key: (t.groups, t.with_signal) for key, t in tallies.items()} == {
        ("tic_tac_toe", "random, seat 1", 0): (1, 1), ("tic_tac_toe", "random, seat 0", 0): (1, 0),
        ("tic_tac_toe", "random, seat -", 0): (1, 0)}
    assert game_groups.tally(game_groups.training_groups(log), window=0)[("tic_tac_toe", "random", 0)].groups == 3

