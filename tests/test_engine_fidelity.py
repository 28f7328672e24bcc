"""bench/learning/engine_fidelity.py: the reward's MCTS values against a stronger search on held-out positions."""

from __future__ import annotations

import json

import pytest

from bench_scripts import load_bench_script

engine_fidelity = load_bench_script("engine_fidelity")


def test_the_reference_agrees_with_itself_and_the_numbers_are_scores(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    assert engine_fidelity.main(["--case", "tic_tac_toe", "--positions", "12", "--simulations", "60,20",
                                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["positions"] == 12 and result["reference_simulations"] == 60
    assert list(result["by_simulations"]) == ["20", "60"]  # sorted, the largest last
    reference = result["by_simulations"]["60"]
    assert reference["best_move_value_by_reference"] == pytest.approx(1.0)  # its own best move is its best
    for row in result["by_simulations"].values():
        assert 0.0 <= row["best_move_value_by_reference"] <= 1.0 and 0.0 < row["best_minus_worst"] <= 1.0
        assert len(row["fixed_moves"]) == 9  # every cell of the board, an occupied one played at random
        # the fixed moves average out to the random mover (an illegal one counts the random mover's score there)
        assert sum(row["fixed_moves"].values()) / 9 == pytest.approx(row["random_mover"])
    assert "| 20 |" in capsys.readouterr().out
