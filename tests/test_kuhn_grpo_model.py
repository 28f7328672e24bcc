"""bench/learning/kuhn_grpo_model.py, the tabular model of whole-hand self-play GRPO on kuhn_poker: its hands are
OpenSpiel's, its sampled returns average to OpenSpiel's exact value, and the documented result holds (the runs'
KL 0.05 swings; KL 0.5 keeps the last policies below half the uniform policy's exploitability)."""

from __future__ import annotations

import numpy as np
import pytest
from open_spiel.python.algorithms import expected_game_score

from bench_scripts import load_bench_script

model = load_bench_script("kuhn_grpo_model")


@pytest.fixture(scope="module")
def table():
    return model.build_table()


def test_the_table_holds_openspiels_information_states_and_returns(table):
    assert table.state_index.shape == (6, 4) and table.returns.shape == (6, 5)
    assert sorted(table.keys) == sorted(["0", "1", "2", "0p", "1p", "2p", "0b", "1b", "2b", "0pb", "1pb", "2pb"])
    for deal in range(6):
        first_card = table.keys[table.state_index[deal, 0]]
        second_card = table.keys[table.state_index[deal, 1]][0]
        winner = 1 if int(first_card) > int(second_card) else -1
        # pass-pass: the higher card wins the ante; bet-call: 2 chips; bet-fold and pass-bet-fold: the bettor's 1
        assert table.returns[deal].tolist() == [winner, -1, 2 * winner, 1, 2 * winner]


def test_sampled_hands_average_to_openspiels_exact_value(table):
    rng = np.random.default_rng(0)
    p_bet = rng.uniform(0.1, 0.9, len(table.keys))
    policy = model.policy_of(table, p_bet)
    exact = expected_game_score.policy_value(model.GAME.new_initial_state(), [policy, policy])[0]
    deals = rng.integers(0, 6, 200_000)
    actions, chips = model.play_hands(table, p_bet, deals, rng)
    assert chips.mean() == pytest.approx(exact, abs=0.01)
    assert ((actions[:, 1] >= 0) == (actions[:, 0] == 0)).all() and ((actions[:, 2] >= 0) == (actions[:, 0] == 1)).all()


def test_a_strong_anchor_keeps_the_last_policies_below_half_the_uniform_policys_exploitability(table):
    start = np.full(len(table.keys), 0.55)
    runs = {beta: model.train(table, start, beta, 0.0, 0.1, 60, seed=0, record_every=10) for beta in (0.05, 0.5)}
    assert runs[0.5][0]["exploitability"] > 0.4  # the near-uniform start
    assert all(r["exploitability"] < 0.229 for r in runs[0.5] if r["step"] >= 30)
    assert runs[0.5][-1]["entropy"] > runs[0.05][-1]["entropy"]  # the anchor is what keeps the policy mixed
