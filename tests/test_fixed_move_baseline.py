"""bench/learning/fixed_move_baseline.py: the held-out score of a collapsed (one-move) policy."""

from __future__ import annotations

import json

from bench_scripts import load_bench_script

baseline = load_bench_script("fixed_move_baseline")

SECTION_ARGS = ["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "openspiel.reward_mode=engine",
                "--set", "openspiel.mcts_simulations=20", "--set", "val_tasks_per_case=6"]


def test_move_label_drops_the_movers_mark() -> None:
    assert baseline.move_label("x3") == baseline.move_label("o3") == "3"
    assert baseline.move_label("o(1,1)") == "(1,1)"
    assert baseline.move_label("e2e4") == "e2e4"  # a move that is not "mark + square" stays as it is


def test_fixed_moves_average_to_the_random_mover(tmp_path) -> None:
    out = tmp_path / "fixed.json"
    assert baseline.main([*SECTION_ARGS, "--prompts", "6", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["tic_tac_toe"]
    assert result["positions"] == 6
    scores = [entry["score"] for entry in result["fixed_moves"].values()]
    assert len(scores) == 9  # every cell is some position's legal move
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert max(scores) == result["best_fixed_score"] <= result["engine_best"] == 1.0
    # a position where a move is illegal counts the random mover's score there, so the fixed moves average out
    # to the random mover exactly (up to the rounding to 4 places)
    assert abs(sum(scores) / len(scores) - result["random"]) < 1e-3


def test_needs_engine_rewards(capsys) -> None:
    try:
        baseline.main(["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "openspiel.reward_mode=legal"])
    except SystemExit as stop:
        assert "reward_mode=engine" in str(stop)
    else:
        raise AssertionError("a legal-mode section must be refused")
