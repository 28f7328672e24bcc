"""bench/learning/ending_pay.py: what each way a whole game ends pays, from a sample log."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "learning"))

import ending_pay  # noqa: E402


def _row(step, case, score, **ending):
    return {"split": "train", "case": case, "game": 1.0, "step": step, "score": score, "win": 0.0, "draw": 0.0,
            "loss": 0.0, "forfeit": 0.0, "truncated": 0.0, **ending}


def test_forfeits_that_pay_more_than_played_out_losses_show_per_window(tmp_path, capsys):
    rows = [_row(1, "tic_tac_toe", 1.0, win=1.0), _row(2, "tic_tac_toe", 0.05, loss=1.0, block_chance=2.0, blocked=1.0),
            _row(3, "tic_tac_toe", 0.3, loss=1.0, forfeit=1.0), _row(12, "tic_tac_toe", 0.3, loss=1.0, forfeit=1.0),
            _row(12, "connect_four", 0.5, draw=1.0),
            {"split": "val", "case": "tic_tac_toe", "game": 1.0, "score": 1.0, "win": 1.0},  # not training
            {"split": "train", "case": "tic_tac_toe", "game": 0.0, "score": 1.0}]  # a single move
    log = tmp_path / "run.samples.jsonl.gz"
    with gzip.open(log, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert ending_pay.main([str(log), "--window", "10", "--out", str(tmp_path / "pay")]) == 0
    out = json.loads((tmp_path / "pay.json").read_text())
    first = next(r for r in out if r["case"] == "tic_tac_toe" and r["steps"] == "1-10")
    assert first["games"] == 3 and first["forfeit"] == {"share": 1 / 3, "mean_reward": 0.3, "missed_tactic": 0.0}
    assert first["loss played out"] == {"share": 1 / 3, "mean_reward": 0.05, "missed_tactic": 1.0}
    assert first["draw"]["mean_reward"] is None and first["win"]["missed_tactic"] == 0.0
    later = next(r for r in out if r["case"] == "tic_tac_toe" and r["steps"] == "11-20")
    assert later["forfeit"]["share"] == 1.0
    assert "| tic_tac_toe | 1-10 | 3 |" in capsys.readouterr().out


def test_a_log_without_training_games_says_so(tmp_path, capsys):
    log = tmp_path / "empty.samples.jsonl"
    log.write_text(json.dumps({"split": "val", "game": 1.0}) + "\n")
    assert ending_pay.main([str(log)]) == 1
    assert "no training games" in capsys.readouterr().out
