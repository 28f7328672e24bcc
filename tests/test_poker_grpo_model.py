"""bench/learning/poker_grpo_model.py, the tabular model of whole-hand self-play GRPO on kuhn and leduc poker: its
hands are OpenSpiel's (a group shares its deal), its sampled returns average to OpenSpiel's exact value, its
advantages are verl's, and the documented kuhn result holds (KL 0.5 keeps the late policies mixed and below half
the uniform policy's exploitability)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from open_spiel.python.algorithms import expected_game_score

from bench_scripts import load_bench_script

model = load_bench_script("poker_grpo_model")


@pytest.fixture(scope="module")
def kuhn():
    return model.TabularGame("kuhn_poker")


def test_sampled_hands_average_to_openspiels_exact_value(kuhn):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet([1.0, 1.0], size=kuhn.legal.shape[0])
    policy = kuhn.policy(probs)
    exact = expected_game_score.policy_value(kuhn.game.new_initial_state(), [policy, policy])[0]
    chips = [kuhn.play(probs, rng.random(model.MAX_CHANCE_NODES), rng)[1][0] for _ in range(20_000)]
    assert np.mean(chips) == pytest.approx(exact, abs=0.03)


def test_a_group_shares_its_deal_and_the_trained_seat_alternates(kuhn):
    rng = np.random.default_rng(1)
    leduc = model.TabularGame("leduc_poker")
    probs = leduc.legal / leduc.legal.sum(axis=1, keepdims=True)
    draws = rng.random(model.MAX_CHANCE_NODES)
    public = set()
    for _ in range(20):
        decisions, _ = leduc.play(probs, draws, rng)
        keys = [leduc.tabular.states[i].information_state_string(p) for p, i, _ in decisions]
        public.update(k.split("[Public: ")[1][0] for k in keys if "[Public: " in k)
        assert {k.split("[Private: ")[1][0] for k, (p, _, _) in zip(keys, decisions) if p == 0} <= {keys[0].split("[Private: ")[1][0]}
    assert len(public) == 1  # every hand that reached the second round saw the same public card
    decisions, rewards = model.sample_groups(kuhn, kuhn.legal / 2.0, 4, 8, rng)
    assert len(rewards) == 32 and ((rewards >= 0) & (rewards <= 1)).all()


def test_advantages_are_verls_with_tied_groups_at_zero():
    adv = model.group_advantages(np.array([1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]), 4)
    assert adv[:4] == pytest.approx([0.866, 0.866, -0.866, -0.866], abs=1e-3) and adv[4:].tolist() == [0.0] * 4


def test_a_start_file_sets_the_policy_and_a_foreign_one_is_refused(kuhn, tmp_path):
    start = tmp_path / "step_0.kuhn_poker.json"
    start.write_text(json.dumps({"policy": {"0": [[0, 0.25], [1, 0.75]]}}))
    probs = model.load_start(start, kuhn)
    assert probs[kuhn.tabular.state_lookup["0"]] == pytest.approx([0.25, 0.75])
    assert probs[kuhn.tabular.state_lookup["1"]] == pytest.approx([0.5, 0.5])  # absent: uniform
    start.write_text(json.dumps({"policy": {"[Observer: 0][Private: 0]": [[0, 1.0]]}}))
    with pytest.raises(ValueError, match="none of kuhn_poker's information states"):
        model.load_start(start, kuhn)
    with pytest.raises(ValueError, match="--game: one of kuhn_poker, leduc_poker"):
        model.TabularGame("chess")


def test_a_strong_anchor_keeps_kuhns_late_policies_below_half_the_uniform_policys_exploitability(kuhn):
    start = np.full(kuhn.legal.shape, 0.5)
    start[:, 1] = 0.55
    start[:, 0] = 0.45
    runs = {beta: model.train(kuhn, start, beta, 0.0, 0.1, 50, seed=0, record_every=10) for beta in (0.05, 0.5)}
    assert runs[0.5][0]["exploitability"] > 0.4  # the near-uniform start
    assert all(r["exploitability"] < 0.229 for r in runs[0.5] if r["step"] >= 30)
    assert runs[0.5][-1]["entropy"] > runs[0.05][-1]["entropy"]  # the anchor is what keeps the policy mixed
