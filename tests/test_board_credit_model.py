"""bench/learning/board_credit_model.py, the tabular model of whole-game tic_tac_toe GRPO: its positions are the
boards (move orders merge), its start keeps the exact value where told to, its games are the agent loop's (Match,
score_game), its per-move advantages are centred per group or per position, its tactic target asks for the one-ply
tactic on top of the kept value, and a short run of each variant trains and reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench_scripts import load_bench_script
from verl_ext.envs import make_env
from verl_ext.envs.openspiel_rules import load_game

model = load_bench_script("board_credit_model")


def _env():
    return make_env("openspiel", {"cases": ["tic_tac_toe"], "task_mode": "game", "game": {"tactics_weight": 0.3}})


def test_move_orders_that_reach_one_board_share_its_row():
    policy = model.TabularPolicy(keep_logit=1.0, noise=1.0, seed=0)
    game = load_game("tic_tac_toe")
    first, second = game.new_initial_state(), game.new_initial_state()
    for action in (0, 4, 8):
        first.apply_action(action)
    for action in (8, 4, 0):
        second.apply_action(action)
    assert policy.row(first) == policy.row(second) and len(policy.rows) == 1
    assert policy.legal[0].sum() == 6 and policy.probs([0])[0][[0, 4, 8]].sum() == 0.0  # taken cells never played


def test_a_start_that_keeps_the_value_never_loses_to_random():
    policy = model.TabularPolicy(keep_logit=5.0, noise=0.0, seed=0)
    result = model.evaluate(policy, _env(), games=20, seed=0)
    assert result["kept"] == 1.0 and result["second_seat"]["loss"] == 0
    assert result["win"]["k"] >= 10  # tic_tac_toe is a draw under best play; random errs often


def test_per_move_advantages_are_centred_per_group_and_zero_where_moves_agree():
    moves = model.Moves(rows=[0] * 6, actions=[0] * 6, games=[0, 0, 1, 2, 2, 3], kept=[1, 0, 1, 1, 1, 1])
    adv = model.move_advantages(moves, np.array([0, 0, 1, 1]))  # games 0-1: group 0, games 2-3: group 1
    assert adv[:3].sum() == pytest.approx(0.0, abs=1e-9) and adv[0] > 0 > adv[1]
    assert np.all(adv[3:] == 0.0)  # group 1 kept every value: no move stands out


def _board(*actions: int):
    state = load_game("tic_tac_toe").new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state


def test_the_tactic_target_asks_for_the_win_on_the_board_where_keeping_the_value_does_not():
    policy = model.TabularPolicy(keep_logit=1.0, noise=1.0, seed=0)
    # x: 0, 4; o: 1, 2 -- x wins at 8 now, and 3 or 6 keep a forced win (a fork) for later
    row = policy.row(_board(0, 1, 4, 2))
    assert policy.kept[row, 8] and policy.tactic[row, 8]
    kept_for_later = [a for a in range(9) if policy.kept[row, a] and a != 8]
    assert kept_for_later and not policy.tactic[row, kept_for_later].any()
    # x: 4, 0; o: 1 -- o is lost (x forks after any reply) and must block 8: every move keeps the value -1, only
    # the block plays the tactic
    lost = policy.row(_board(4, 1, 0))
    assert policy.kept[lost, policy.legal[lost]].all()
    assert np.flatnonzero(policy.tactic[lost]).tolist() == [8]


def test_position_baselines_pay_nothing_where_every_move_meets_the_target():
    policy = model.TabularPolicy(keep_logit=1.0, noise=1.0, seed=0)
    forced = policy.row(_board(0, 1, 4, 2))  # one win to take: the tactic target has one move of five
    opening = policy.row(_board())  # every opening move keeps the draw
    moves = model.Moves(rows=[forced, forced, opening], actions=[8, 5, 4], games=[0, 0, 1],
                        kept=[1, float(policy.kept[forced, 5]), 1], tactic=[1, 0, 1])
    tactic = model.position_advantages(moves, policy, "tactic")
    assert tactic == pytest.approx([1 - 1 / 5, -1 / 5, 0.0])
    kept = model.position_advantages(moves, policy, "kept")
    share = policy.kept[forced, policy.legal[forced]].mean()
    assert kept[0] == pytest.approx(1 - share) and kept[2] == 0.0
    credit = model.credit_advantages(model.VARIANTS["per-move-tactic-baseline"], moves, policy, np.array([0, 0]))
    assert credit == pytest.approx(tactic)
    assert not model.credit_advantages(model.VARIANTS["outcome"], moves, policy, np.array([0, 0])).any()
    with pytest.raises(ValueError):
        model.Credit(target="won", baseline="position")


def test_each_variant_trains_and_reports(tmp_path):
    out = tmp_path / "credit.json"
    assert model.main(["--variants", ",".join(model.VARIANTS), "--steps", "2", "--seeds", "1", "--groups", "2",
                       "--every", "1", "--eval-games", "4", "--lr", "0.5", "--out", str(out),
                       "--plot", str(tmp_path / "credit.png")]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == set(model.VARIANTS)
    for runs in results.values():
        assert [r["step"] for r in runs[0]] == [0, 1, 2]
        assert all(0.0 <= r["kept"] <= 1.0 and r["win"]["n"] == 4 and r["positions"] > 0 for r in runs[0])
        assert all(r["took_win"] is None or 0.0 <= r["took_win"] <= 1.0 for r in runs[0])
        assert all(r["took_win"] is not None or r["win_chances"] == 0 for r in runs[0])
    assert (tmp_path / "credit.png").stat().st_size > 10_000
    joined = tmp_path / "joined.json"
    assert model.main(["--join", str(out), str(out), "--out", str(joined)]) == 0  # two files: the seeds add up
    assert {v: len(runs) for v, runs in json.loads(joined.read_text())["results"].items()} == dict.fromkeys(results, 2)


def test_an_unknown_variant_or_a_share_outside_0_1_is_refused():
    with pytest.raises(SystemExit):
        model.main(["--variants", "outcome,turn-level"])
    with pytest.raises(SystemExit):
        model.main(["--second-seat", "1.5"])


def test_the_second_seat_share_sets_the_training_groups_seats():
    assert [model.group_seat(g, g, 0.5) for g in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]  # both opponents, both seats
    drawn = [model.group_seat(g, 1000 + g, 0.75) for g in range(800)]
    assert 0.70 < sum(drawn) / len(drawn) < 0.80
    assert {model.group_seat(g, g, 1.0) for g in range(50)} == {1}
    assert {model.group_seat(g, g, 0.0) for g in range(50)} == {0}
