"""One-ply tactics (verl_ext/envs/tactics.py) and their place in the single-move suite: wins taken, threats
blocked, and the tactics line beside the fixed-move line."""

from __future__ import annotations

import json

import pytest

from verl_ext.envs.openspiel_env import legal_move_actions, load_game
from verl_ext.evaluation.cli import main as eval_main
from verl_ext.envs.tactics import OnePly, has_tactics, one_ply, tactical_move_texts, tactics_line
from verl_ext.evaluation.policies import MoveRequest, ScriptedPolicy


def tic_tac_toe_after(*actions: int) -> str:
    state = load_game("tic_tac_toe").new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state.serialize()


def test_a_win_on_the_board_is_found_and_outranks_the_threat():
    # x: 0, 1; o: 3, 4. x to move wins at 2; o threatens 5, but the win comes first
    tactics = one_ply("tic_tac_toe", tic_tac_toe_after(0, 3, 1, 4))
    assert tactics.winning == {2} and tactics.win_available and not tactics.must_block
    assert tactics.tactical_moves() == {2}
    assert 2 not in tactics.losing and tactics.losing == tactics.legal - {2, 5}


def test_a_threat_must_be_blocked_in_the_one_cell_that_stops_it():
    # x: 0, 8; o: 4, 1. o threatens the middle column (1, 4, 7); x has no win
    tactics = one_ply("tic_tac_toe", tic_tac_toe_after(0, 4, 8, 1))
    assert not tactics.winning and tactics.must_block
    assert tactics.legal - tactics.losing == {7} and tactics.tactical_moves() == {7}


def test_a_quiet_position_has_no_tactics_and_every_move_is_tactical():
    tactics = one_ply("tic_tac_toe", tic_tac_toe_after(4))
    assert not tactics.win_available and not tactics.must_block
    assert tactics.tactical_moves() == tactics.legal and len(tactics.legal) == 8


def test_connect_four_vertical_threat():
    state = load_game("connect_four").new_initial_state()
    for action in (0, 1, 0, 1, 0):  # x has three in column 0; o to move must play column 0
        state.apply_action(action)
    tactics = one_ply("connect_four", state.serialize())
    assert not tactics.winning and tactics.must_block and tactics.legal - tactics.losing == {0}


def test_games_without_one_ply_tactics_are_skipped():
    assert has_tactics("tic_tac_toe") and has_tactics("connect_four")
    assert not has_tactics("kuhn_poker")  # imperfect information
    state = load_game("kuhn_poker").new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.legal_actions()[0])
    assert one_ply("kuhn_poker", state.serialize()) is None


def test_the_tactics_line_averages_the_tactical_moves_of_each_position():
    win = OnePly(legal=frozenset({0, 1, 2}), winning=frozenset({1}), losing=frozenset())
    block = OnePly(legal=frozenset({0, 1, 2}), winning=frozenset(), losing=frozenset({0, 1}))
    lost = OnePly(legal=frozenset({0, 1}), winning=frozenset(), losing=frozenset({0, 1}))  # every move loses
    scores = {0: 0.2, 1: 1.0, 2: 0.6}
    assert tactics_line([(win, scores)]) == pytest.approx(1.0)
    assert tactics_line([(block, scores)]) == pytest.approx(0.6)
    assert tactics_line([(lost, scores)]) == pytest.approx(0.6)  # random among all
    assert tactics_line([(win, scores), (block, scores)]) == pytest.approx(0.8)
    assert tactics_line([]) is None


def test_the_single_move_suite_reports_tactics_per_model_and_the_line(tmp_path):
    out = tmp_path / "eval"
    argv = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "val_tasks_per_case=24",
            "--set", "openspiel.mcts_simulations=20", "--suites", "single",
            "--models", "first=scripted:first", "random=scripted:random", "tactician=scripted:tactician",
            "--no-progress", "--out", str(out)]
    assert eval_main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    for case in ("tic_tac_toe", "connect_four"):
        line = results["single_move_baseline"][case]
        assert line["win_positions"] + line["block_positions"] > 0
        assert line["random_mover"] < line["tactics_line"] <= 1.0
        # the suite gives the tactician its moves: it takes every win and blocks every threat, and one draw of it
        # scores the line (the line is its mean over the draws) within its own sampling spread
        single = results["models"]["tactician"]["single_move"]["cases"][case]
        tactics = single["tactics"]
        assert tactics["win_taken"]["k"] == tactics["win_taken"]["n"] == line["win_positions"] > 0
        assert tactics["blocked"]["k"] == tactics["blocked"]["n"] == line["block_positions"]
        assert single["legal"]["rate"] == 1.0 and abs(single["engine_score"] - line["tactics_line"]) < 0.05
        assert single["engine_score"] > results["models"]["random"]["single_move"]["cases"][case]["engine_score"]
        for model in ("first", "random", "tactician"):
            tactics = results["models"][model]["single_move"]["cases"][case]["tactics"]
            assert tactics["win_taken"]["n"] == line["win_positions"]
            assert tactics["blocked"]["n"] == line["block_positions"]
            # the engine score split into positions with a win or a block and the rest: the two parts make the whole
            single = results["models"][model]["single_move"]["cases"][case]
            tactical, quiet = tactics["engine_where_tactical"], tactics["engine_elsewhere"]
            assert tactical["n"] == line["win_positions"] + line["block_positions"]
            assert tactical["n"] + quiet["n"] == single["n"]
            assert (tactical["mean"] * tactical["n"] + quiet["mean"] * quiet["n"]) / single["n"] == pytest.approx(
                single["engine_score"])
    md = (out / "results.md").read_text()
    assert "Tactics line" in md and ("| case | first: took the win | first: blocked | first: engine, win or block | "
                                     "first: engine, elsewhere |") in md


def test_the_reward_reports_each_replys_tactics_and_never_changes_the_score():
    """compute_score's extras win_chance / win_taken / block_chance / blocked for single moves; the score is the
    adapter's whatever the tactics say, and a hostile reply is a chance missed, not an error."""
    from verl_ext.reward import compute_score

    def scored(state: str, reply: str) -> dict:
        info = {"env": "openspiel", "case": "tic_tac_toe", "state": state,
                "env_config": json.dumps({"game_types": ["tic_tac_toe"], "reward_mode": "engine",
                                          "mcts_simulations": 20})}
        return compute_score("openspiel", reply, None, info)

    win = tic_tac_toe_after(0, 3, 1, 4)  # x wins at 2 = (0,2)
    taken, missed = scored(win, "<answer>x(0,2)</answer>"), scored(win, "<answer>x(2,2)</answer>")
    assert (taken["win_chance"], taken["win_taken"], taken["block_chance"]) == (1.0, 1.0, 0.0)
    assert (missed["win_chance"], missed["win_taken"]) == (1.0, 0.0) and missed["score"] < taken["score"]
    for hostile in ("", "<answer>x(0,2)</answer>" * 50, "\x00" * 1000):
        bad = scored(win, hostile)
        assert bad["win_chance"] == 1.0 and bad["win_taken"] == 0.0 and bad["failed"] == 0.0
    threat = tic_tac_toe_after(0, 4, 8, 1)  # o threatens (2,1) = action 7
    blocked, not_blocked = scored(threat, "<answer>x(2,1)</answer>"), scored(threat, "<answer>x(0,2)</answer>")
    assert (blocked["block_chance"], blocked["blocked"], blocked["win_chance"]) == (1.0, 1.0, 0.0)
    assert (not_blocked["block_chance"], not_blocked["blocked"]) == (1.0, 0.0)
    quiet = scored(tic_tac_toe_after(4), "<answer>x(0,0)</answer>")
    assert (quiet["win_chance"], quiet["block_chance"]) == (0.0, 0.0)


def test_step_metrics_share_the_tactics_over_the_replies_that_had_the_chance():
    from verl_ext.envs.tactics import TACTIC_KEYS
    from verl_ext.group_stats import TACTIC_FIELDS, Reply, step_metrics

    assert TACTIC_FIELDS == TACTIC_KEYS  # the reward's names, kept apart to keep group_stats import-light
    replies = ([Reply("a", 1.0, 1.0, case="tic_tac_toe", win_chance=1.0, win_taken=1.0, block_chance=0.0)] * 3
               + [Reply("a", 0.2, 2.0, case="tic_tac_toe", win_chance=1.0, win_taken=0.0, block_chance=0.0)]
               + [Reply("b", 0.5, 3.0, case="connect_four", win_chance=0.0, block_chance=1.0, blocked=1.0)]
               + [Reply("b", 0.1, 4.0, case="connect_four", win_chance=0.0, block_chance=1.0, blocked=0.0)] * 3
               + [Reply("c", 0.0, 5.0, case="connect_four")])  # a reward without tactics extras
    metrics = step_metrics(replies)
    assert metrics["tactics/win_taken"] == pytest.approx(0.75) and metrics["tactics/win_chances"] == 4.0
    assert metrics["tactics/blocked"] == pytest.approx(0.25) and metrics["tactics/block_chances"] == 4.0
    assert metrics["tactics/win_taken/tic_tac_toe"] == pytest.approx(0.75)
    assert metrics["tactics/blocked/connect_four"] == pytest.approx(0.25)
    assert "tactics/blocked/tic_tac_toe" not in metrics  # no chance, no share
    assert not any(key.startswith("tactics/") for key in step_metrics([Reply("z", 1.0, 1.0)]))


def test_the_plot_draws_the_tactics_per_case(tmp_path):
    from verl_ext.plot import main as plot_main

    metrics = tmp_path / "run.metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": step, "data": {
        "critic/score/mean": 0.5, "tactics/win_taken/tic_tac_toe": 0.2 * step, "tactics/blocked/tic_tac_toe": 0.1}})
        + "\n" for step in (1, 2, 3)) + json.dumps({"step": 3, "data": {  # verl's validation: means over all samples
            "val-aux/openspiel/tic_tac_toe/win_chance/mean@1": 0.4, "val-aux/openspiel/tic_tac_toe/win_taken/mean@1": 0.1,
            "val-aux/openspiel/tic_tac_toe/block_chance/mean@1": 0.0, "val-aux/openspiel/tic_tac_toe/blocked/mean@1": 0.0}})
        + "\n")
    assert plot_main([str(metrics), "--out", str(tmp_path / "plots"), "--kind", "grpo"]) == 0
    panels = json.loads(next((tmp_path / "plots").glob("*.json")).read_text())["panels"]
    lines = panels["one-ply tactics: wins taken, threats blocked"]["lines"]
    assert lines["win taken: tic_tac_toe"] == [[1, 0.2], [2, 0.4], [3, pytest.approx(0.6)]]
    assert lines["blocked: tic_tac_toe"] == [[1, 0.1], [2, 0.1], [3, 0.1]]
    markers = panels["one-ply tactics: wins taken, threats blocked"]["markers"]
    assert markers == {"win taken, held-out openspiel/tic_tac_toe (greedy)": [[3, pytest.approx(0.25)]]}  # 0.1 / 0.4


def _request(case: str, state, seed: int) -> MoveRequest:
    """What a suite asks about ``state``: its legal moves and its tactical moves, from the real state."""
    return MoveRequest((), tuple(legal_move_actions(state)), seed, tactical_move_texts(case, state.serialize()))


@pytest.mark.parametrize("case,actions,expected", [
    ("tic_tac_toe", (0, 3, 1, 4), {2}),  # x wins at 2 (o's threat at 5 comes second)
    ("tic_tac_toe", (0, 4, 8, 1), {7}),  # o threatens the middle column: x blocks at 7
    ("connect_four", (0, 0, 1, 1, 2, 2), {3}),  # x has three in the bottom row: wins at column 3
    ("connect_four", (0, 1, 0, 1, 0), {0}),  # x has three in column 0: o blocks there
    ("connect_four", (0, 6, 1, 6, 2, 6), {3}),  # x wins at column 3 before o's threat in column 6 matters
])
def test_the_tactician_always_takes_the_win_and_blocks_the_threat(case, actions, expected):
    state = load_game(case).new_initial_state()
    for action in actions:
        state.apply_action(action)
    moves = legal_move_actions(state)
    tactical = tactical_move_texts(case, state.serialize())
    assert {moves[m] for m in tactical} == expected and set(tactical) <= set(moves)
    tactician = ScriptedPolicy("t", "tactician")
    replies = tactician.respond([_request(case, state, seed) for seed in range(40)])
    assert {moves[reply.removeprefix("<answer>").removesuffix("</answer>")] for reply in replies} == expected
    # the random mover, on the same seeds, misses it
    randoms = ScriptedPolicy("r", "random").respond([_request(case, state, seed) for seed in range(40)])
    assert {moves[reply.removeprefix("<answer>").removesuffix("</answer>")] for reply in randoms} > expected


def test_without_tactical_moves_the_tactician_is_the_random_mover():
    state = load_game("kuhn_poker").new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.legal_actions()[0])
    assert tactical_move_texts("kuhn_poker", state.serialize()) == ()  # imperfect information: no one-ply tactics
    requests = [MoveRequest((), ("Pass", "Bet"), seed) for seed in range(20)]
    assert ScriptedPolicy("t", "tactician").respond(requests) == ScriptedPolicy("r", "random").respond(requests)
    assert ScriptedPolicy("t", "tactician").respond([MoveRequest(())]) == ["<answer>?</answer>"]  # a puzzle
