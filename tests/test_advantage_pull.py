"""bench/learning/advantage_pull.py: verl's GRPO advantages turned into per-move pushes, with and without the
division by the group's std, on real engine values."""

from __future__ import annotations

import numpy as np
import pytest

from bench_scripts import load_bench_script

pull = load_bench_script("advantage_pull")


def test_a_groups_push_goes_to_the_moves_that_beat_its_mean():
    # one group of 4: move 0 paid 1.0 twice, move 1 paid 0.0 twice -> verl's advantages +-0.866 (unbiased std)
    rewards = np.array([[1.0, 1.0, 0.0, 0.0]])
    choices = np.array([[0, 0, 1, 1]])
    push, with_signal = pull.group_pushes(rewards, choices, 2, norm_by_std=True)
    assert with_signal == 1 and push[0] == pytest.approx(-push[1]) and push[0] == pytest.approx(2 / np.sqrt(4 / 3), rel=1e-5)  # float32
    raw, _ = pull.group_pushes(rewards, choices, 2, norm_by_std=False)
    assert raw.tolist() == pytest.approx([1.0, -1.0])  # Dr. GRPO: the rewards' own deviations from the mean
    flat, none = pull.group_pushes(np.full((1, 4), 0.5), choices, 2, norm_by_std=True)
    assert none == 0 and flat.tolist() == [0.0, 0.0]


def test_std_division_weighs_a_near_tie_like_a_blunder():
    choices = np.array([[0, 0, 1, 1]])
    near_tie, _ = pull.group_pushes(np.array([[0.51, 0.51, 0.50, 0.50]]), choices, 2, norm_by_std=True)
    blunder, _ = pull.group_pushes(np.array([[1.0, 1.0, 0.0, 0.0]]), choices, 2, norm_by_std=True)
    assert near_tie[0] == pytest.approx(blunder[0], rel=1e-3)
    near_tie_raw, _ = pull.group_pushes(np.array([[0.51, 0.51, 0.50, 0.50]]), choices, 2, norm_by_std=False)
    assert near_tie_raw[0] == pytest.approx(0.01)


def test_policies_and_rewards_are_parsed_or_refused_by_name():
    assert pull.parse_policy("uniform") == ("uniform", 0.0) and pull.parse_policy("favourite:0.5") == ("favourite", 0.5)
    assert pull.move_distribution([1, 3, 5], 3, ("favourite", 0.5)).tolist() == [0.25, 0.5, 0.25]
    assert pull.move_distribution([1, 5], 3, ("favourite", 0.5)).tolist() == [0.5, 0.5]  # favourite illegal here
    assert pull.paid_scores({0: 1.0, 1: 0.97, 2: 0.5}, 0.05) == {0: 1.0, 1: 1.0, 2: 0.0}
    assert pull.parse_reward("engine") is None and pull.parse_reward("best:0") == 0.0
    for bad, flag in (("favourite:1.5", "--policy"), ("greedy", "--policy"), ("best:x", "--reward"), ("top", "--reward")):
        with pytest.raises(SystemExit, match=f"{flag} '{bad}'"):
            (pull.parse_policy if flag == "--policy" else pull.parse_reward)(bad)


def test_tic_tac_toe_push_on_real_engine_values(capsys):
    result = pull.analyse("tic_tac_toe", 12, ["uniform"], groups=8, n=8, seed=0, rewards=("engine", "best:0"))
    assert result["positions"] == 12 and sum(result["position_classes"].values()) == 12
    rows = {(r["reward"], r["norm_adv_by_std_in_grpo"]): r for r in result["results"]}
    assert len(rows) == 4
    for row in rows.values():
        assert sum(row["mass_share"].values()) == pytest.approx(1.0)
        assert 0 < row["groups_with_signal"] <= 1 and row["board_signal_per_position"] > 0
        # each group's advantages sum to 0 (tied groups at 0, as the train scripts run verl)
        assert sum(row["shared_pull"].values()) == pytest.approx(0.0, abs=1e-5)
    assert rows[("best:0", True)]["best_move_pull"] == pytest.approx(1.0, abs=1e-5)
    noise = result["tied_group_noise"]  # verl's own numbers for a tied group: rounding noise
    assert 0 < noise["nonzero"] <= noise["distinct_rewards"] and 0 < noise["max_abs"] < 0.2
    # paying only the best move pushes only towards it
    assert rows[("engine", False)]["board_signal_per_position"] < rows[("engine", True)]["board_signal_per_position"]
    pull.print_table(result)
    assert "| best:0 | uniform | no (Dr. GRPO) |" in capsys.readouterr().out


def test_tactic_gaps_compare_the_one_ply_moves_with_the_best_other_move():
    import pyspiel

    def position(*actions: int) -> str:
        state = pyspiel.load_game("tic_tac_toe").new_initial_state()
        for action in actions:
            state.apply_action(action)
        return state.serialize()

    # x takes 0 and 1, o 3 and 4: x wins at 2 (o threatens 5); a win worth 0.5 more than the best other move
    win = position(0, 3, 1, 4)
    # x has 0 and 8, o 4 and 2: no win for x, o threatens 6; another move (1) pays as much as the block
    threat = position(0, 4, 8, 2)
    tables = [{2: 1.0, 5: 0.5, 6: 0.0, 7: 0.0, 8: 0.0}, {6: 0.5, 1: 0.5, 3: 0.0, 5: 0.0, 7: 0.0}]
    gaps = pull.tactic_gaps("tic_tac_toe", [win, threat], tables)
    assert gaps["win"] == {"positions": 1, "mean_gap": 0.5, "best_other_pays": 0.5, "share_gap_at_most_0": 0.0,
                           "share_gap_at_most_0.1": 0.0}
    assert gaps["block"]["positions"] == 1 and gaps["block"]["mean_gap"] == 0.0
    assert gaps["block"]["share_gap_at_most_0"] == 1.0
    quiet = position(4)  # no win, no threat: left out
    assert pull.tactic_gaps("tic_tac_toe", [quiet], [{0: 1.0, 1: 0.5}]) == {"win": {"positions": 0},
                                                                          "block": {"positions": 0}}
