"""Arena game loop with scripted policies against OpenSpiel bots: known outcomes, forfeits, determinism."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from verl_ext.envs import ConfigError
from verl_ext.envs.card_games import RANK_NAMES
from verl_ext.envs.openspiel_env import load_game
from verl_ext.evaluation import report
from verl_ext.evaluation.arena import Arena, ArenaSettings, Opponent, legal_adapter, parse_opponents
from verl_ext.evaluation.policies import MoveRequest, RecordingPolicy, ScriptedPolicy
from verl_ext.evaluation.stats import mean_interval, proportion, wilson_interval
from verl_ext.mixture import EnvMixture

RANDOM = (Opponent("random"),)


def _arena(games: list[str], **settings) -> Arena:
    adapter = legal_adapter(EnvMixture({"openspiel": {"cases": games}}))
    return Arena(adapter, ArenaSettings(**{"opponents": RANDOM, **settings}))


def _card_arena(game_type: str, **settings) -> Arena:
    """An arena on one of the card-game names of ``game_types`` (hanabi_small, holdem_small, kuhn_poker)."""
    adapter = legal_adapter(EnvMixture({"openspiel": {"game_types": [game_type]}}))
    return Arena(adapter, ArenaSettings(**{"opponents": RANDOM, **settings}))


def _match(result: dict, case: str, opponent: str = "random") -> dict:
    return next(m for m in result["matches"] if m["case"] == case and m["opponent"] == opponent)


def _check_counts(match: dict) -> None:
    n = match["games"]
    assert match["win"]["k"] + match["draw"]["k"] + match["loss"]["k"] == n
    assert match["forfeit"]["k"] <= match["loss"]["k"]
    assert sum(sum(seat.values()) for seat in match["by_seat"].values()) == n
    for key in ("win", "draw", "loss", "forfeit"):
        p = match[key]
        assert p["n"] == n and 0.0 <= p["ci_low"] <= p["rate"] <= p["ci_high"] <= 1.0
    assert 0.0 <= match["score"] <= 1.0 and 0.0 <= match["mean_normalised_return"] <= 1.0


def test_random_vs_random_is_even_with_alternating_seats():
    games = {"tic_tac_toe": 300, "connect_four": 200}
    for case, n in games.items():
        result = _arena([case], games_per_case=n).play(ScriptedPolicy("rnd", "random"), progress=False)
        match = _match(result, case)
        _check_counts(match)
        assert match["forfeit"]["k"] == 0 and match["rejected_replies"] == 0
        # By symmetry wins and losses are equally likely; 0.15 is about three standard errors here.
        assert abs(match["win"]["rate"] - match["loss"]["rate"]) < 0.15, match
        # Seats alternate, and moving first is an advantage in both games.
        seats = match["by_seat"]
        assert sum(seats["0"].values()) == sum(seats["1"].values()) == n // 2
        assert seats["0"]["win"] > seats["1"]["win"]


def test_recording_policy_keeps_every_request_and_reply_without_changing_the_games():
    plain = _arena(["tic_tac_toe"], games_per_case=6).play(ScriptedPolicy("rnd", "random"), progress=False)
    recorder = RecordingPolicy(ScriptedPolicy("rnd", "random"))
    recorded = _arena(["tic_tac_toe"], games_per_case=6).play(recorder, progress=False)
    match = _match(recorded, "tic_tac_toe")
    assert match == _match(plain, "tic_tac_toe")
    assert recorder.name == "rnd" and len(recorder.log) == match["model_moves"]
    for request, reply in recorder.log:
        assert isinstance(request, MoveRequest) and reply in {f"<answer>{m}</answer>" for m in request.legal_moves}


@pytest.mark.parametrize("case,simulations,n", [("tic_tac_toe", 100, 20), ("connect_four", 50, 10)])
def test_mcts_beats_random_far_above_chance(case, simulations, n):
    opponent = Opponent("mcts", simulations)
    result = _arena([case], games_per_case=n, opponents=(opponent,)).play(ScriptedPolicy("rnd", "random"),
                                                                           progress=False)
    match = _match(result, case, opponent.label)
    _check_counts(match)
    assert match["win"]["ci_high"] < 0.5  # the random policy almost never wins
    assert match["loss"]["ci_low"] > 0.5  # MCTS wins most games


def test_always_illegal_forfeits_every_game_and_retries_are_counted():
    n, retries = 6, 2
    result = _arena(["tic_tac_toe", "leduc_poker"], games_per_case=n, illegal_retries=retries).play(
        ScriptedPolicy("bad", "illegal"), progress=False)
    for match in result["matches"]:
        _check_counts(match)
        assert match["forfeit"]["k"] == match["loss"]["k"] == n
        assert match["model_moves"] == 0
        assert match["rejected_replies"] == n * (1 + retries) and match["retries"] == n * retries
        assert match["forfeit_reasons"] == {"illegal_move": n}
        assert match["rejections"]["replies"] == n * (1 + retries)


class _FixesOnRetry:
    """Illegal on the first try, first legal move once told the reply was rejected."""

    name = "fixer"

    def __init__(self) -> None:
        self.retry_prompts: list[tuple[dict, ...]] = []

    def respond(self, requests: list[MoveRequest]) -> list[str]:
        replies = []
        for r in requests:
            if len(r.messages) == 1:
                replies.append("<answer>not a move</answer>")
            else:
                self.retry_prompts.append(r.messages)
                replies.append(f"<answer>{r.legal_moves[0]}</answer>")
        return replies

    def close(self) -> None:
        return None


def test_a_retry_shows_the_rejected_reply_and_can_save_the_game():
    policy = _FixesOnRetry()
    result = _arena(["tic_tac_toe"], games_per_case=4, illegal_retries=1).play(policy, progress=False)
    match = _match(result, "tic_tac_toe")
    _check_counts(match)
    assert match["forfeit"]["k"] == 0 and match["model_moves"] > 0
    assert match["rejected_replies"] == match["retries"] == match["model_moves"]
    first = policy.retry_prompts[0]
    assert [m["role"] for m in first] == ["user", "assistant", "user"]
    assert first[1]["content"] == "<answer>not a move</answer>" and "illegal_move" in first[2]["content"]
    # without retries the same policy forfeits at once
    strict = _arena(["tic_tac_toe"], games_per_case=4).play(_FixesOnRetry(), progress=False)
    assert _match(strict, "tic_tac_toe")["forfeit"]["k"] == 4


class _Hostile:
    """Replies no parser should choke on."""

    name = "hostile"
    REPLIES = ["", "\x00\x01", "<answer>" + "x" * 100_000 + "</answer>", "<answer>0</answer><answer>1</answer>",
               "<answer>\n</answer>", "<answer>０</answer>", "<ANSWER>", None, 12345, "</answer><answer>",
               "<answer>" + "\ud800" + "</answer>"]

    def __init__(self) -> None:
        self.i = 0

    def respond(self, requests: list[MoveRequest]) -> list:
        out = []
        for _ in requests:
            out.append(self.REPLIES[self.i % len(self.REPLIES)])
            self.i += 1
        return out

    def close(self) -> None:
        return None


def test_hostile_replies_forfeit_without_crashing():
    n = len(_Hostile.REPLIES)
    result = _arena(["tic_tac_toe"], games_per_case=n).play(_Hostile(), progress=False)
    json.dumps(result).encode()  # samples of the replies stay valid UTF-8
    match = _match(result, "tic_tac_toe")
    _check_counts(match)
    assert match["forfeit"]["k"] == n
    assert sum(match["forfeit_reasons"].values()) == n
    assert set(match["forfeit_reasons"]) >= {"no_answer_tag", "several_answer_tags", "not_text"}


def test_same_seed_same_games_and_another_seed_differs():
    cases = ["tic_tac_toe", "leduc_poker"]  # leduc: chance nodes and hidden cards
    runs = [_arena(cases, games_per_case=12, seed=seed).play(ScriptedPolicy("rnd", "random"), progress=False)
            for seed in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_move_cap_counts_unfinished_games_as_draws():
    result = _arena(["connect_four"], games_per_case=4, max_game_moves=3).play(ScriptedPolicy("f", "first"),
                                                                                progress=False)
    match = _match(result, "connect_four")
    assert match["truncated"] == match["draw"]["k"] == 4 and match["mean_game_length"] == 3


def test_mcts_is_skipped_where_openspiel_mcts_cannot_play():
    mixture = EnvMixture({"openspiel": {"cases": ["tic_tac_toe", "hanabi(players=2)"]}})
    arena = Arena(legal_adapter(mixture), ArenaSettings(games_per_case=2, opponents=(Opponent("mcts", 5),)))
    result = arena.play(ScriptedPolicy("rnd", "random"), progress=False)
    assert [m["case"] for m in result["matches"]] == ["tic_tac_toe"]
    assert result["skipped"][0]["case"] == "hanabi(players=2)" and "terminal rewards" in result["skipped"][0]["reason"]


def test_prompts_are_the_training_prompts_and_hide_private_information():
    mixture = EnvMixture({"openspiel": {"cases": ["tic_tac_toe", "leduc_poker"], "num_tasks_per_case": 4}})
    adapter = mixture.adapters["openspiel"]
    for ref in mixture.plan("train"):
        task = mixture.build(ref)
        state = load_game(task.case).deserialize_state(task.state)
        assert adapter.position_prompt(task.case, state) == task.messages[0]["content"]
        if task.case == "leduc_poker":
            player = state.current_player()
            prompt = adapter.position_prompt(task.case, state)
            assert f"Your card: {RANK_NAMES[state.private_card(player) // 2]}." in prompt  # its own card, in words
            assert str(state).rstrip() not in prompt  # the full state shows both private cards


def test_opponent_parsing_names_the_bad_entry():
    assert [o.label for o in parse_opponents("random, mcts:64")] == ["random", "mcts:64"]
    assert parse_opponents("mcts")[0].simulations > 0
    for bad, needle in (("random,alphazero", "'alphazero'"), ("mcts:0", "'mcts:0'"), ("mcts:x", "'mcts:x'"),
                        ("", "at least one"), ("random,random", "twice")):
        with pytest.raises(ConfigError, match=needle):
            parse_opponents(bad)


def test_wilson_interval_matches_published_values():
    # Newcombe (1998), Table I: 0/10 -> (0, 0.2775); 5/10 -> (0.2366, 0.7634); 81/263 -> (0.2553, 0.3662)
    for k, n, (lo, hi) in ((0, 10, (0.0, 0.2775)), (5, 10, (0.2366, 0.7634)), (81, 263, (0.2553, 0.3662))):
        low, high = wilson_interval(k, n)
        assert low == pytest.approx(lo, abs=1e-4) and high == pytest.approx(hi, abs=1e-4)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 0) == (0.0, 1.0)
    assert proportion(0, 0)["rate"] is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


class _Recorder:
    """First legal move; remembers the prompts it was given."""

    name = "recorder"

    def __init__(self) -> None:
        self.prompts: list[tuple[dict, ...]] = []

    def respond(self, requests: list[MoveRequest]) -> list[str]:
        self.prompts += [r.messages for r in requests]
        return [f"<answer>{r.legal_moves[0]}</answer>" for r in requests]

    def close(self) -> None:
        return None


def test_game_context_gives_the_whole_conversation_and_the_same_games():
    fresh, whole = _Recorder(), _Recorder()
    results = [_arena(["tic_tac_toe"], games_per_case=2, context=context).play(policy, progress=False)
               for context, policy in (("turn", fresh), ("game", whole))]
    assert results[0] == results[1]  # the context changes what the policy sees, not the rules
    assert {len(p) for p in fresh.prompts} == {1}
    assert max(len(p) for p in whole.prompts) >= 5 and [m["role"] for m in whole.prompts[-1]][-3:] == [
        "user", "assistant", "user"]
    with pytest.raises(ConfigError, match="--game-context: unknown value 'full'"):
        _arena(["tic_tac_toe"], context="full")


def test_self_play_puts_the_policy_in_every_seat_and_reports_the_team_score():
    # Hanabi's target measure: the team score of a policy with itself (issue 47), 200 games, seats alternating.
    recorder = _Recorder()
    result = _card_arena("hanabi_small", games_per_case=4, opponents=tuple(parse_opponents("self"))).play(
        recorder, progress=False)
    match = result["matches"][0]
    assert match["opponent"] == "self" and match["games"] == 4 and not result["skipped"]
    # both seats asked the policy: more prompts than the recorded seat's own moves
    assert len(recorder.prompts) > match["model_moves"] > 0
    plain = _card_arena("hanabi_small", games_per_case=200, opponents=tuple(parse_opponents("self"))).play(
        ScriptedPolicy("rnd", "random"), progress=False)
    m = plain["matches"][0]
    ret = m["mean_return"]
    # a random pair's team score (bench/learning/card_games.py: 1.11 with itself over 10,000 games), of 6
    assert ret["n"] == 200 and 0.5 < ret["mean"] < 2.0 and ret["ci_low"] < ret["mean"] < ret["ci_high"]
    assert ret["mean"] == pytest.approx(6 * m["mean_normalised_return"])


def test_mean_return_is_in_chips_with_a_normal_interval_and_forfeits_pay_the_lowest_utility():
    # Kuhn against the random bot: random play earns 0 on average; 1,000 hands give an interval of about +-0.09
    result = _arena(["kuhn_poker"], games_per_case=1000).play(ScriptedPolicy("rnd", "random"), progress=False)
    ret = _match(result, "kuhn_poker")["mean_return"]
    assert ret["n"] == 1000 and ret["ci_low"] < 0.0 < ret["ci_high"] and ret["ci_high"] - ret["ci_low"] < 0.25
    assert ret["mean"] == pytest.approx(-2 + 4 * _match(result, "kuhn_poker")["mean_normalised_return"])
    forfeits = _arena(["kuhn_poker"], games_per_case=10).play(ScriptedPolicy("bad", "illegal"), progress=False)
    ret = _match(forfeits, "kuhn_poker")["mean_return"]
    assert ret == {"n": 10, "mean": -2.0, "sd": 0.0, "ci_low": -2.0, "ci_high": -2.0}


def test_mean_interval_matches_the_normal_formula():
    values = [1.0, -1.0, 2.0, -2.0, 1.0]
    got = mean_interval(values, 0.95)
    sd = statistics.stdev(values)
    half = 1.959963984540054 * sd / math.sqrt(5)
    assert got["mean"] == pytest.approx(0.2) and got["sd"] == pytest.approx(sd)
    assert (got["ci_low"], got["ci_high"]) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    assert mean_interval([3.0])["ci_low"] is None and mean_interval([])["mean"] is None


class _ColumnThree:
    """Always its own side's column 3 at connect_four: legal until the column is full, then rejected every time."""

    name = "column3"

    def respond(self, requests: list[MoveRequest]) -> list[str]:
        return [f"<answer>{r.legal_moves[0][0]}3</answer>" for r in requests]

    def close(self) -> None:
        return None


def test_rejections_say_what_was_rejected_against_which_moves_and_whether_the_correction_helped():
    n = 8
    result = _arena(["connect_four"], games_per_case=n, illegal_retries=1).play(_ColumnThree(), progress=False)
    match = _match(result, "connect_four")
    _check_counts(match)
    rejections = match["rejections"]
    assert rejections["replies"] == match["rejected_replies"] > 0
    assert rejections["reasons"] == {"illegal_move": match["rejected_replies"]}
    # every forfeit here is the full column named twice: once before the correction, once after it
    assert match["forfeit"]["k"] > 0 and rejections["repeated_after_correction"] == match["forfeit"]["k"]
    assert 0 < len(rejections["examples"]) <= 3
    for example in rejections["examples"]:
        assert example["answer"][1:] == "3" and example["answer"] not in example["legal_moves"]
        assert example["reason"] == "illegal_move" and len(example["legal_moves"]) == 6
    results = {"models": {"column3": {"arena": result}}}
    lines = report._rejection_lines(results, ["column3"])
    assert lines[0].startswith("Rejected replies") and len(lines) == 4
    assert f"column3, connect_four vs random: {match['rejected_replies']} rejected replies (illegal_move " in lines[2]
    assert "repeating the answer rejected just before; e.g. `" in lines[2] and "when the legal moves were" in lines[2]
    assert report._rejection_lines({"models": {"m": {"arena": {"matches": [{"case": "c", "opponent": "o"}]}}}},
                                   ["m"]) == []  # a results file from before this field renders as before


class _LoneSurrogate:
    """An answer no UTF-8 file can hold as it is (a lone surrogate)."""

    name = "surrogate"

    def respond(self, requests: list[MoveRequest]) -> list[str]:
        return ["<answer>\ud800x</answer>" for _ in requests]

    def close(self) -> None:
        return None


def test_a_rejected_answer_that_is_not_valid_utf8_is_kept_as_valid_text():
    result = _arena(["tic_tac_toe"], games_per_case=2, illegal_retries=1).play(_LoneSurrogate(), progress=False)
    answer = _match(result, "tic_tac_toe")["rejections"]["examples"][0]["answer"]
    assert answer == "?x"  # replaced, as the reply samples are
    "\n".join(report._rejection_lines({"models": {"s": {"arena": result}}}, ["s"])).encode("utf-8")


def test_the_tactician_takes_every_win_blocks_every_threat_and_beats_random_in_full_games():
    arena = _arena(["tic_tac_toe", "connect_four"], games_per_case=20)
    tactician = RecordingPolicy(ScriptedPolicy("tactician", "tactician"))
    played = arena.play(tactician, progress=False)
    baseline = arena.play(ScriptedPolicy("rnd", "random"), progress=False)
    for case in ("tic_tac_toe", "connect_four"):
        match, random_match = _match(played, case), _match(baseline, case)
        _check_counts(match)
        tactics = match["tactics"]
        assert tactics["win_taken"]["n"] > 0 and tactics["win_taken"]["k"] == tactics["win_taken"]["n"]
        assert tactics["blocked"]["n"] > 0 and tactics["blocked"]["k"] == tactics["blocked"]["n"]
        assert match["win"]["k"] > random_match["win"]["k"] and match["forfeit"]["k"] == 0
    for request, reply in tactician.log:  # every turn came with its tactical moves, and they were legal
        assert request.tactical_moves and set(request.tactical_moves) <= set(request.legal_moves)
        assert reply.removeprefix("<answer>").removesuffix("</answer>") in request.tactical_moves


def test_games_without_one_ply_tactics_give_no_tactical_moves():
    tactician = RecordingPolicy(ScriptedPolicy("tactician", "tactician"))
    result = _arena(["leduc_poker"], games_per_case=4).play(tactician, progress=False)
    assert _match(result, "leduc_poker")["forfeit"]["k"] == 0 and tactician.log
    assert all(request.tactical_moves == () for request, _ in tactician.log)
