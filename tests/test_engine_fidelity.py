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
        assert len(row["fixed_moves"]) == 9  # every cell of the board (x and o: one move), an occupied one at random
        assert all("/" in move for move in row["fixed_moves"])
        # the fixed moves average out to the random mover (an illegal one counts the random mover's score there)
        assert sum(row["fixed_moves"].values()) / 9 == pytest.approx(row["random_mover"])
    assert "| 20 |" in capsys.readouterr().out


tactician_games = load_bench_script("tactician_games")


def test_the_tactician_plays_whole_games_through_the_arenas_episodes(tmp_path, capsys):
    out = tmp_path / "games.json"
    assert tactician_games.main(["--cases", "tic_tac_toe", "--opponents", "random", "--games", "24",
                                 "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert (row["case"], row["player"], row["opponent"], row["games"]) == ("tic_tac_toe", "tactician", "random", 24)
    assert row["win"]["k"] + row["draw"]["k"] + row["loss"]["k"] == 24
    assert row["win"]["k"] > row["loss"]["k"]  # it takes every win on the board and blocks every single threat
    assert "| tic_tac_toe | tactician | random | 24 |" in capsys.readouterr().out


def test_the_optimal_player_never_loses_and_a_game_too_long_to_search_is_refused(tmp_path):
    """--player optimal: a random move among the best exact values (alpha-beta); tic_tac_toe is a draw under best
    play, so it never loses, and it wins more than the tactician against random."""
    out = tmp_path / "optimal.json"
    assert tactician_games.main(["--cases", "tic_tac_toe", "--opponents", "random", "--games", "24",
                                 "--player", "optimal", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["player"] == "optimal" and row["loss"]["k"] == 0 and row["win"]["k"] >= 18
    with pytest.raises(SystemExit, match="case 'connect_four' cannot be"):
        tactician_games.play("connect_four", "random", 2, player="optimal")


@pytest.mark.slow
def test_the_best_response_to_random_is_the_ceiling_against_the_random_bot(tmp_path, capsys):
    """OpenSpiel's BestResponsePolicy against the uniform random policy, through the arena's episodes: as the first
    seat it never loses (its value there is 0.995), it wins more than the tactician, and a large game is refused."""
    out = tmp_path / "br.json"
    assert tactician_games.main(["--cases", "tic_tac_toe", "--opponents", "random", "--games", "40",
                                 "--player", "best-response", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["player"] == "best-response" and row["games"] == 40
    first, second = row["by_seat"]
    assert sum(first.values()) == sum(second.values()) == 20 and first["loss"] == 0
    tactician = tactician_games.play("tic_tac_toe", "random", 40)
    assert row["win"]["k"] >= 36 > tactician["win"]["k"]
    assert "| tic_tac_toe | best-response | random | 40 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="case 'connect_four' is too large"):
        tactician_games.play("connect_four", "random", 2, player="best-response")


def test_the_tactician_takes_a_win_and_blocks_a_threat():
    import random

    from verl_ext.envs.openspiel_env import load_game

    state = load_game("tic_tac_toe").new_initial_state()
    for action in (0, 3, 1, 4):  # x to move wins at 2 (o threatens 5)
        state.apply_action(action)
    assert tactician_games.tactician_move("tic_tac_toe", state.serialize(), state.legal_actions(),
                                          random.Random(0)) == 2
    state = load_game("tic_tac_toe").new_initial_state()
    for action in (0, 4, 8, 1):  # o threatens 7; x has no win
        state.apply_action(action)
    assert all(tactician_games.tactician_move("tic_tac_toe", state.serialize(), state.legal_actions(),
                                              random.Random(seed)) == 7 for seed in range(5))


@pytest.mark.slow
def test_exact_counts_the_reward_moves_that_lose_against_best_play(tmp_path):
    out = tmp_path / "exact.json"
    assert engine_fidelity.main(["--case", "tic_tac_toe", "--positions", "300", "--simulations", "300", "--exact",
                                 "--split", "training-rows", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["split"] == "training-rows" and result["positions"] == 300
    # the openings that MCTS with random rollouts answers with a losing move recur among the rows
    assert result["by_simulations"]["300"]["blunders_by_alpha_beta"] > 0
    with pytest.raises(SystemExit, match="cannot search kuhn_poker to the end: it is not a game of perfect"):
        engine_fidelity.analyse("kuhn_poker", 2, [20], exact=True)
