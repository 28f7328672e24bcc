"""The reward trusts a game record only when it adds up (verl_ext/games/record_check.py): one test per loophole
of issue 45 item 4, and real played games (scripted replies through verl_ext/games/match.py) still scoring
exactly as before the checks."""

from __future__ import annotations

import json
import logging
import math
import random

import numpy as np
import pytest

from verl_ext.envs.episode import UtilityRange
from verl_ext.games import RECORD_FIELD
from verl_ext.games.match import GameRecord, Match, MatchRules
from verl_ext.games.record_check import RecordError, trusted_record
from verl_ext.games.scoring import score_game
from verl_ext.log_limit import RateLimitedLog
from verl_ext.mixture import EnvMixture
from verl_ext.reward import METRIC_KEYS, compute_score

TIC_TAC_TOE = UtilityRange(2, -1.0, 1.0, zero_sum=True)


def _rows(case: str = "tic_tac_toe", **game) -> list[dict]:
    mixture = EnvMixture({"openspiel": {"game_types": [case], "task_mode": "game", "num_tasks_per_case": 4,
                                        "game": {"illegal_retries": 1, **game}}})
    return [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]


def _score(record: dict, row: dict | None = None) -> dict[str, float]:
    row = row or _rows()[0]
    return compute_score(row["data_source"], "the whole conversation", "", {**row["extra_info"], RECORD_FIELD: record})


def _win(**changes) -> dict:
    """A legitimate tic_tac_toe win of seat 0 as Match writes it, with ``changes``."""
    record = GameRecord("tic_tac_toe", 0, 0, "random", result="win", returns=[1.0, -1.0], normalised_return=1.0,
                        moves=7, model_turns=4, model_moves=4, format_ok=4, model_tokens=40).to_dict()
    return {**record, **changes}


def _refused(record: dict, caplog: pytest.LogCaptureFixture, field: str, row: dict | None = None) -> str:
    """Scores ``record`` and checks it was refused (0, failed) with a warning naming ``field``; the warning."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_ext.reward"):
        scored = _score(record, row)
    assert tuple(scored) == METRIC_KEYS
    assert scored["score"] == 0.0 and scored["failed"] == 1.0 and scored["game"] == 0.0 and scored["win"] == 0.0
    warnings = [r.getMessage() for r in caplog.records if "refused a game record" in r.getMessage()]
    assert warnings and f"game record {field}=" in warnings[0], caplog.text
    return warnings[0]


@pytest.fixture(autouse=True)
def _every_refusal_logged(monkeypatch):
    """A fresh rate limit per test, wide enough that each test's refusals are all logged."""
    import verl_ext.reward as reward

    monkeypatch.setattr(reward, "_refusals", RateLimitedLog(reward.logger, burst=100))


def test_a_legitimate_record_is_paid_in_full():
    scored = _score(_win())
    assert (scored["score"], scored["failed"], scored["win"], scored["game"]) == (1.0, 0.0, 1.0, 1.0)


def test_a_loss_claiming_a_full_return_is_refused(caplog):
    # returns say loss, the record claims a normalised return of 1.0
    message = _refused(_win(result="loss", returns=[-1.0, 1.0], normalised_return=1.0), caplog, "normalised_return")
    assert "normalised_return=1.0" in message and "normalises to 0.0" in message
    # the returns say loss, the record says win
    assert "make it a loss" in _refused(_win(returns=[-1.0, 1.0]), caplog, "result")
    # no returns: result and normalised return must agree (two-player zero-sum)
    bare = {**_win(result="loss", normalised_return=1.0), "returns": None}
    assert "makes it a win" in _refused(bare, caplog, "result")


@pytest.mark.parametrize("field,value,named", [
    ("normalised_return", math.nan, "normalised_return=nan"), ("normalised_return", math.inf, "normalised_return=inf"),
    ("normalised_return", "1.0", "normalised_return='1.0'"), ("normalised_return", True, "normalised_return=True"),
    ("returns", [math.nan, 0.0], "returns[0]=nan"), ("returns", [math.inf, -math.inf], "returns[0]=inf"),
    ("returns", ["1", "-1"], "returns[0]='1'"), ("returns", [5.0, -5.0], "returns[0]=5.0"),
    ("returns", [1.0], "returns=[1.0]"), ("returns", "win", "returns='win'"),
    ("returns", [1.0, -0.5], "returns=[1.0, -0.5]"),  # tic_tac_toe is zero-sum
])
def test_non_finite_string_or_out_of_range_returns_are_refused(caplog, field, value, named):
    message = _refused(_win(**{field: value}), caplog, named.split("=")[0])
    assert f"game record {named}:" in message


def test_a_game_that_is_not_over_is_refused(caplog):
    assert "not over" in _refused(_win(result=None, returns=None, normalised_return=None), caplog, "result")
    assert "not one of" in _refused(_win(result="victory"), caplog, "result")


@pytest.mark.parametrize("field,value", [("format_ok", 9), ("model_moves", 9), ("model_moves", 5), ("rejected", 5),
                                         ("retries", 1), ("format_ok", -1), ("model_turns", 2.5),
                                         ("model_tokens", "40"), ("seat", 2)])
def test_counts_beyond_the_turns_they_count_are_refused(caplog, field, value):
    message = _refused(_win(**{field: value}), caplog, field)
    assert repr(value) in message


def test_forfeits_and_truncations_must_look_like_them(caplog):
    forfeit = _win(result="loss", forfeit="illegal_move", returns=None, normalised_return=None)
    assert _score(forfeit)["score"] == 0.0 and _score(forfeit)["failed"] == 0.0
    assert "is a loss" in _refused({**forfeit, "result": "win"}, caplog, "result")
    assert "has none" in _refused({**forfeit, "normalised_return": 1.0}, caplog, "normalised_return")
    truncated = _win(result=None, truncated="move_cap", returns=None, normalised_return=None)
    row = _rows(truncated_reward=0.25)[0]
    assert _score(truncated, row)["score"] == 0.25
    assert "truncated" in _refused({**truncated, "normalised_return": 1.0}, caplog, "normalised_return", row)
    assert "the row plays" in _refused(_win(case="connect_four"), caplog, "case")


def test_refusals_are_logged_at_a_limited_rate(caplog):
    now = [0.0]
    limit = RateLimitedLog(logging.getLogger("verl_ext.test_limit"), burst=2, interval_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="verl_ext.test_limit"):
        logged = [limit.warn("refused %s", i) for i in range(10)]
        now[0] = 61.0
        logged.append(limit.warn("refused %s", 10))
    assert logged == [True, True] + [False] * 8 + [True]
    last = caplog.records[-1].getMessage()
    assert last == "refused 10 (8 more like it held back since the last one logged)"


def test_a_numpy_round_trip_is_accepted():
    record = {**_win(), "returns": np.array([1.0, -1.0]), "moves": np.int64(7), "model_turns": 4.0}
    assert trusted_record(record, TIC_TAC_TOE, "tic_tac_toe").normalised_return == 1.0
    with pytest.raises(RecordError, match=r"game record returns=None: needed to check the outcome of 'hanabi"):
        trusted_record({**_win(case="hanabi"), "returns": None}, UtilityRange(2, 0.0, 25.0), "hanabi")


def _policies(rng: random.Random):
    """Scripted replies: always legal, a legal move or junk, and junk only (a forfeit at the first turn)."""
    def legal(turn) -> str:
        return f"I play <answer>{rng.choice(turn.legal_moves)}</answer>"

    def sloppy(turn) -> str:
        return legal(turn) if rng.random() < 0.7 else rng.choice(["<answer>nowhere</answer>", "no tag", ""])

    return {"legal": legal, "sloppy": sloppy, "junk": lambda turn: "I resign"}


@pytest.mark.parametrize("case,game", [
    ("tic_tac_toe", {}), ("connect_four", {"format_weight": 0.1, "legal_weight": 0.2}),
    ("leduc_poker", {"legal_weight": 0.3}), ("connect_four", {"max_moves": 6, "truncated_reward": 0.25}),
])
def test_played_games_score_as_before(case, game):
    from verl_ext.games.agent_loop import game_setup

    rng = random.Random(7)
    outcomes = set()
    for row in _rows(case, **game):
        setup = game_setup(row["extra_info"])
        for name, policy in _policies(rng).items():
            match = Match(setup.adapter.start_episode(setup.case, setup.seed, setup.seat),
                          setup.settings.opponent_spec, MatchRules.from_settings(setup.settings))
            while (turn := match.next_request()) is not None:
                match.submit(policy(turn))
            match.record.model_tokens = 11 * match.record.model_turns
            stored = json.loads(json.dumps(match.record.to_dict()))  # as it travels through verl's batch
            before = score_game(GameRecord.from_dict(stored), setup.settings)  # the scoring before the checks
            scored = _score(stored, row)
            assert scored["failed"] == 0.0, (name, stored)
            assert scored["score"] == before.score and scored["task_score"] == before.outcome
            assert (scored["format_ok"], scored["valid"]) == (before.format_rate, before.legal_rate)
            trusted = trusted_record(stored, setup.adapter.utility_range(case), case)
            assert trusted == match.record  # the checked record is the played one, field for field
            outcomes.add(match.record.outcome)
    assert len(outcomes) >= 2  # the scripted games end in more than one way


def _match(case: str, seat: int, seed: int = 3) -> Match:
    """A game of ``case`` against the rows' default opponent (the random bot), the policy in ``seat``."""
    from verl_ext.games.agent_loop import game_setup

    setup = game_setup(_rows(case)[0]["extra_info"])
    return Match(setup.adapter.start_episode(setup.case, seed, seat), setup.settings.opponent_spec,
                 MatchRules.from_settings(setup.settings))


def _played(case: str, seat: int, replies) -> GameRecord:
    """The record of one game of ``case`` with the policy in ``seat``, its replies from ``replies(turn)``."""
    match = _match(case, seat)
    while (turn := match.next_request()) is not None:
        match.submit(replies(turn))
    return match.record


def test_the_opening_reply_is_kept_only_where_the_policy_made_the_games_first_decision():
    """GameRecord.opening_move: the collapse metrics of whole games compare a group's opening replies, which share
    a position only where no player moved before (the group shares the deal and the seed)."""
    from verl_ext.envs.answer import action_key
    from verl_ext.envs.openspiel_rules import legal_move_actions

    first = lambda turn: f"<answer>{turn.legal_moves[0]}</answer>"  # noqa: E731
    # the move's canonical answer, as single moves count it: its OpenSpiel action
    fresh = _match("tic_tac_toe", 0)
    opening = fresh.next_request().legal_moves[0]
    expected = action_key(legal_move_actions(fresh.episode.state)[opening])
    assert _played("tic_tac_toe", 0, first).opening_move == expected
    assert _played("tic_tac_toe", 1, first).opening_move is None  # the random bot moved first
    # a rejected opening reply is the empty answer (the collapse metrics' "no answer"), whatever comes after it
    replies = iter(["no tag at all"])
    retried = _played("tic_tac_toe", 0, lambda turn: next(replies, None) or first(turn))
    assert retried.opening_move == "" and retried.rejected == 1 and retried.model_moves >= 1
    # kuhn: the deal is chance, so the first player's reply still opens a position its group shares
    assert _played("kuhn_poker", 0, first).opening_move in {action_key(0), action_key(1)}  # Pass, Bet


@pytest.mark.parametrize("value,why", [(7, "not a string"), ("x" * 257, "not a string"), ([], "not a string")])
def test_an_opening_move_that_is_no_bounded_string_is_refused(caplog, value, why):
    assert why in _refused(_win(opening_move=value), caplog, "opening_move")


@pytest.mark.parametrize("changes,field,why", [
    ({"reply_values": [1, 2]}, "reply_values", "not a list of 0s and 1s"),
    ({"reply_values": "1,0"}, "reply_values", "not a list of 0s and 1s"),
    ({"reply_values": [True]}, "reply_values", "not a list of 0s and 1s"),
    ({"reply_values": [0] * 5}, "reply_values", "more than model_turns=4"),
    ({"reply_values": [1, 1], "value_turns": 2, "values_kept": 1}, "reply_values", "more kept than values_kept=1"),
    ({"move_credit": float("nan")}, "move_credit", "not a finite number"),
    ({"move_credit": 11.0}, "move_credit", "not in [0, 10.0]"),
])
def test_reply_values_and_move_credit_that_no_game_wrote_are_refused(caplog, changes, field, why):
    assert why in _refused(_win(**changes), caplog, field)


def test_reply_values_and_move_credit_that_a_game_wrote_are_kept():
    record = _win(reply_values=[1, 0, 1], value_turns=3, values_kept=2, move_credit=0.5)
    assert _score(record)["failed"] == 0.0
    trusted = trusted_record(record, TIC_TAC_TOE, "tic_tac_toe")
    assert trusted.reply_values == [1, 0, 1] and trusted.move_credit == 0.5


def test_an_opening_move_needs_a_model_turn_and_sets_the_answer_id(caplog):
    from verl_ext.envs.answer import answer_id
    from verl_ext.reward import NOT_AN_OPENING

    none = dict(model_turns=0, model_moves=0, format_ok=0)
    assert "no opening reply" in _refused(_win(opening_move="action:4", **none), caplog, "opening_move")
    assert _score(_win(opening_move="action:4"))["answer_id"] == answer_id("action:4")
    assert _score(_win(opening_move=""))["answer_id"] == answer_id(None) == 0.0  # a rejected opening: no answer
    assert _score(_win())["answer_id"] == NOT_AN_OPENING  # another player moved first
