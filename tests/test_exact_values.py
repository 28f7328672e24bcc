"""engine_solver=exact (verl_ext/envs/exact_values.py): game-theoretic move values by OpenSpiel's alpha-beta search
for small two-player zero-sum games, in place of MCTS with random rollouts, which ranks some losing tic_tac_toe
opening replies first."""

from __future__ import annotations

import json
import random

import pytest

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs.openspiel_env import load_game
from verl_ext.reward import compute_score

from test_tactics import tic_tac_toe_after as after

EXACT = {"game_types": ["tic_tac_toe"], "reward_mode": "engine", "engine_solver": "exact", "mcts_simulations": 50}




def test_after_a_corner_only_the_centre_draws_and_it_is_the_reference_move():
    adapter = make_env("openspiel", EXACT)
    scores = adapter.task_scores("tic_tac_toe", after(2))  # x(0,2); o to move
    assert scores[4] == 1.0 and all(score == 0.5 for action, score in scores.items() if action != 4)
    assert adapter.best_move("tic_tac_toe", after(2)) == "o(1,1)"


def test_values_are_win_draw_loss_under_best_play():
    adapter = make_env("openspiel", EXACT)
    scores = adapter.task_scores("tic_tac_toe", after(0, 3, 1, 4))  # x wins at 2; 5 blocks o and draws; else lost
    assert scores[2] == 1.0 and scores[5] == 0.5 and {scores[a] for a in (6, 7, 8)} == {0.0}
    # the empty board: every first move draws; the reference is then MCTS's pick among them, the same every time
    empty = after()
    assert set(adapter.task_scores("tic_tac_toe", empty).values()) == {1.0}
    assert adapter.best_move("tic_tac_toe", empty) == make_env("openspiel", EXACT).best_move("tic_tac_toe", empty)


def test_the_reward_pays_the_drawing_reply_and_not_the_losing_one():
    info = {"env": "openspiel", "case": "tic_tac_toe", "state": after(2), "env_config": json.dumps(EXACT)}
    centre = compute_score("openspiel", "<answer>o(1,1)</answer>", None, info)
    corner = compute_score("openspiel", "<answer>o(0,0)</answer>", None, info)
    assert centre["task_score"] == 1.0 and corner["task_score"] == 0.5 and corner["score"] < centre["score"]


def test_precomputed_tables_of_the_other_solver_are_not_taken():
    exact = make_env("openspiel", EXACT)
    mcts = make_env("openspiel", {**EXACT, "engine_solver": "mcts"})
    task = exact.make_task("tic_tac_toe", 0, 5)
    table = mcts.move_values(task)
    assert "solver=" not in json.loads(table)["settings"]  # the default's tables are as before
    assert not exact.prime_move_values("tic_tac_toe", task.state, table)
    assert exact.prime_move_values("tic_tac_toe", task.state, exact.move_values(task))


def test_games_it_cannot_value_are_refused_naming_the_key():
    for case, why in (("connect_four", "games last up to 42 moves"), ("kuhn_poker", "zero-sum")):
        with pytest.raises(ConfigError, match=rf"engine_solver: 'exact' cannot value '{case}'.*"):
            make_env("openspiel", {**EXACT, "game_types": [case]})
    with pytest.raises(ConfigError, match=r"engine_solver: unknown value 'minimax'"):
        make_env("openspiel", {**EXACT, "engine_solver": "minimax"})
    make_env("openspiel", {**EXACT, "game_types": ["connect_four"], "reward_mode": "legal"})  # not used: fine


def test_exact_agrees_with_a_full_search_on_random_positions():
    """Every legal move's value against a plain negamax over the whole remaining tree (OpenSpiel plays the moves)."""
    game = load_game("tic_tac_toe")

    def negamax(state) -> float:
        if state.is_terminal():
            return state.returns()[0]
        values = []
        for action in state.legal_actions():
            child = state.clone()
            child.apply_action(action)
            values.append(negamax(child))
        return max(values) if state.current_player() == 0 else min(values)

    adapter = make_env("openspiel", EXACT)
    rng = random.Random(0)
    for _ in range(12):
        state = game.new_initial_state()
        for _ in range(rng.randint(2, 6)):
            state.apply_action(rng.choice(state.legal_actions()))
            if state.is_terminal():
                break
        if state.is_terminal():
            continue
        mover = state.current_player()
        sign = 1.0 if mover == 0 else -1.0
        scores = adapter.task_scores("tic_tac_toe", state.serialize())
        children = {}
        for action in state.legal_actions():
            child = state.clone()
            child.apply_action(action)
            children[action] = sign * negamax(child)
        best = max(children.values())
        for action, value in children.items():
            assert scores[action] == pytest.approx(1.0 - (best - value) / 2.0)  # returns in [-1, 1] -> [0, 1]
