"""bench/learning/tactic_pay.py: what playing or missing a one-ply tactic paid in a run's training games."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "learning"))

import tactic_pay  # noqa: E402


def _game(step, case, opponent, score, win=0.0, **counts):
    return {"split": "train", "case": case, "opponent": opponent, "game": 1.0, "step": step, "score": score,
            "win": win, **counts}


def test_blocks_played_and_missed_are_split_with_their_pay_per_case_opponent_and_window(tmp_path, capsys):
    rows = [_game(1, "connect_four", "random", 0.9, win=1.0, block_chance=2.0, blocked=2.0),
            _game(2, "connect_four", "random", 0.4, win=1.0, block_chance=2.0, blocked=1.0),  # one of two: missed
            _game(3, "connect_four", "random", 0.0, block_chance=1.0, blocked=0.0),
            _game(4, "connect_four", "random", 1.0, win=1.0, win_chance=1.0, win_taken=1.0),  # no threat
            _game(4, "connect_four", "mcts:5", 0.1, block_chance=1.0, blocked=0.0),
            _game(31, "connect_four", "random", 0.8, win=1.0, block_chance=1.0, blocked=1.0),
            _game(5, "connect_four", "random", 0.0, block_chance=float("nan"), blocked=0.0),  # unreadable: no chance
            {"split": "val", "case": "connect_four", "opponent": "random", "game": 1.0, "block_chance": 1.0},
            {"split": "train", "case": "tic_tac_toe", "game": 0.0, "block_chance": 1.0, "blocked": 1.0}]
    log = tmp_path / "run.samples.jsonl.gz"
    with gzip.open(log, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert tactic_pay.main([str(log), "--window", "30", "--out", str(tmp_path / "pay")]) == 0
    out = json.loads((tmp_path / "pay.json").read_text())
    block = next(r for r in out if (r["tactic"], r["opponent"], r["steps"]) == ("block", "random", "1-30"))
    assert block["games"] == 3
    assert block["played"] == {"share": 1 / 3, "win_rate": 1.0, "mean_reward": 0.9}
    assert block["missed"] == {"share": 2 / 3, "win_rate": 0.5, "mean_reward": pytest.approx(0.2)}
    assert block["reward_gap"] == pytest.approx(0.7)
    mcts = next(r for r in out if (r["tactic"], r["opponent"]) == ("block", "mcts:5"))
    assert mcts["played"] == {"share": 0.0, "win_rate": None, "mean_reward": None} and mcts["reward_gap"] is None
    later = next(r for r in out if (r["tactic"], r["steps"]) == ("block", "31-60"))
    assert later["games"] == 1 and later["played"]["share"] == 1.0
    win = next(r for r in out if r["tactic"] == "win")
    assert win["games"] == 1 and win["played"]["mean_reward"] == 1.0
    assert not any(r["case"] == "tic_tac_toe" for r in out)
    printed = capsys.readouterr().out
    assert "| block | connect_four | random | 1-30 | 3 | 33 %, 100 %, 0.900 | 67 %, 50 %, 0.200 | +0.700 |" in printed
    assert (tmp_path / "pay.md").read_text().startswith("| tactic |")


def test_a_log_without_tactics_counts_says_so(tmp_path, capsys):
    log = tmp_path / "old.samples.jsonl"
    log.write_text(json.dumps(_game(1, "tic_tac_toe", "random", 1.0, win=1.0)) + "\n")
    assert tactic_pay.main([str(log)]) == 1
    assert "no training game with a one-ply tactic" in capsys.readouterr().out


def test_a_window_below_one_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        tactic_pay.main([str(tmp_path / "x.jsonl"), "--window", "0"])
