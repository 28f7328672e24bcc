"""bench/learning/best_run.py: which run's kept model to bring back, read from the runs' eval results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_scripts import load_bench_script

best_run = load_bench_script("best_run")


def _results(root: Path, run: str, rates: dict[str, float], kept: bool = True, opponent: str = "random") -> None:
    matches = [{"case": case, "opponent": opponent, "games": 200,
                "win": {"k": round(200 * rate), "n": 200, "rate": rate}} for case, rate in rates.items()]
    matches.append({"case": "tic_tac_toe", "opponent": "mcts:50", "games": 200, "win": {"rate": 0.99}})
    (root / run / "eval").mkdir(parents=True)
    (root / run / "eval" / "results.json").write_text(json.dumps(
        {"models": {"grpo": {"arena": {"matches": matches}}, "random": {"arena": {"matches": []}}}}))
    if kept:
        (root / "kept-models" / run).mkdir(parents=True)
        (root / "kept-models" / run / "SHA256SUMS").write_text("x  coldstart.tar.000\n")


def test_the_weakest_game_decides_and_only_kept_models_count(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _results(tmp_path, "lr", {"tic_tac_toe": 0.90, "connect_four": 0.80})     # lowest 80: worse, though mean 85
    _results(tmp_path, "ladder", {"tic_tac_toe": 0.84, "connect_four": 0.84})
    _results(tmp_path, "unkept", {"tic_tac_toe": 0.95, "connect_four": 0.95}, kept=False)
    (tmp_path / "broken" / "eval").mkdir(parents=True)
    (tmp_path / "broken" / "eval" / "results.json").write_text("{not json")
    assert best_run.main([str(tmp_path), "--kept"]) == 0
    out, err = capsys.readouterr()
    assert out == "ladder\n"
    assert "ladder: lowest 84.0 %" in err and "lr: lowest 80.0 %" in err and "unkept" not in err
    assert best_run.main([str(tmp_path)]) == 0  # every run with an eval; the MCTS(50) rows are not ranked
    out, err = capsys.readouterr()
    assert out == "unkept\n" and "broken" in err and "unreadable" in err


def test_no_eval_against_the_opponent_is_an_error_that_says_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _results(tmp_path, "lr", {"tic_tac_toe": 0.9}, opponent="mcts:5")
    assert best_run.main([str(tmp_path), "--kept"]) == 1
    assert "no run under" in capsys.readouterr().err
    assert best_run.main([str(tmp_path), "--opponent", "mcts:5"]) == 0
