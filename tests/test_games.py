"""Full games without verl: the episode protocol on every default game, the shared match rules, the game
reward and its metrics, configuration errors, game rows in the dataset and the token-budget tool."""

from __future__ import annotations

import json

import pytest

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs.card_games import NAMED_CASES
from verl_ext.envs.conformance import check_episodes
from verl_ext.envs.episode import Episode, Opponent, parse_opponent
from verl_ext.envs.game_settings import GameSettings
from verl_ext.envs.openspiel_env import DEFAULT_CASES
from verl_ext.export import build_rows
from verl_ext.games import GAME_AGENT_NAME, RECORD_FIELD, SINGLE_TURN_AGENT_NAME
from verl_ext.games.budget import game_cost, measure
from verl_ext.envs.episode import MoveCheck
from verl_ext.games.match import (FALLBACK, FORFEIT, LISTED_MOVES, RETRY, SHOWN_ANSWER_CHARS, GameRecord, Match,
                                   MatchRules, correction_text)
from verl_ext.games.scoring import GAME_METRIC_KEYS, game_metrics, outcome_value, score_game
from verl_ext.mixture import EnvMixture
from verl_ext.reward import METRIC_KEYS, compute_score


EPISODE_CASES = list(DEFAULT_CASES) + [c for c in NAMED_CASES.values() if c not in DEFAULT_CASES]


def adapter(*cases: str, **settings):
    return make_env("openspiel", {"cases": list(cases), **settings})


@pytest.mark.parametrize("case", EPISODE_CASES, ids=[c[:24] for c in EPISODE_CASES])
def test_every_default_and_named_game_plays_whole_episodes(case):
    env = adapter(case, reference_cfr_iterations=50)  # poker references: a short CFR+ solve (holdem_small: ~3 s)
    check_episodes(env, case)
    assert isinstance(env.start_episode(case, 0, 0), Episode)


def test_episode_resolves_chance_from_its_seed_and_refuses_illegal_moves():
    env = adapter("leduc_poker")
    a, b, c = (env.start_episode("leduc_poker", seed, 0) for seed in (5, 5, 6))
    assert not a.state.is_chance_node() and a.prompt() == b.prompt()
    assert any(env.start_episode("leduc_poker", s, 0).prompt() != a.prompt() for s in range(6, 12))
    assert c.seed == 6 and c.num_players == 2
    with pytest.raises(ValueError, match="not a legal move"):
        a.play("Bet everything")
    with pytest.raises(ValueError, match="seat 2 is not a player"):
        env.start_episode("leduc_poker", 0, 2)


def _play(match: Match, reply) -> list[str]:
    verdicts = []
    while (turn := match.next_request()) is not None:
        verdicts.append(match.submit(reply(turn)))
    return verdicts


def test_bots_are_seeded_per_game():
    env = adapter("connect_four")

    def game(seed: int) -> tuple:
        match = Match(env.start_episode("connect_four", seed, 1), Opponent("mcts", 20), MatchRules())
        _play(match, lambda turn: f"<answer>{turn.legal_moves[0]}</answer>")
        return tuple(match.conversation(1)), match.record.to_dict()

    assert game(3) == game(3) and game(3) != game(4)


def test_forfeit_after_the_allowed_retries_and_the_conversation_shows_them():
    match = Match(adapter("tic_tac_toe").start_episode("tic_tac_toe", 0, 0), Opponent("random"),
                  MatchRules(illegal_retries=2))
    verdicts = _play(match, lambda turn: "<answer>x(5,5)</answer>")
    assert verdicts == [RETRY, RETRY, FORFEIT] and match.done and match.next_request() is None
    record = match.record
    assert (record.result, record.forfeit, record.rejected, record.retries, record.model_moves) == (
        "loss", "illegal_move", 3, 2, 0)
    roles = [m["role"] for m in match.conversation(0)]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    legal = "x(0,0), x(0,1), x(0,2), x(1,0), x(1,1), x(1,2), x(2,0), x(2,1), x(2,2)"
    assert match.conversation(0)[2]["content"] == (
        "That reply was rejected (illegal_move: x(5,5) is not a legal move now). "
        f"Legal moves: {legal}. End your reply with exactly one of them, in the form <answer>MOVE</answer>.")
    with pytest.raises(RuntimeError, match="without a pending request"):
        match.submit("<answer>x(0,0)</answer>")


def test_the_correction_after_a_full_column_names_it_and_lists_the_open_columns():
    # the connect_four cold start's forfeits: it named its favourite column after the column was full
    match = Match(adapter("connect_four").start_episode("connect_four", 0, 0), Opponent("self"),
                  MatchRules(illegal_retries=1))
    for _ in range(6):
        turn = match.next_request()
        assert match.submit(f"<answer>{'x' if turn.player == 0 else 'o'}3</answer>") == "accepted"
    turn = match.next_request()
    assert "x3" not in turn.legal_moves and match.submit("<answer>x3</answer>") == RETRY
    correction = match.conversation(0)[-1]["content"]
    assert "x3 is not a legal move now" in correction
    assert "Legal moves: x0, x1, x2, x4, x5, x6." in correction


def test_the_correction_cuts_a_long_answer_and_does_not_list_a_long_move_list():
    long_answer = "o" * 5000
    text = correction_text(MoveCheck(long_answer, False, "illegal_move"), [f"m{i}" for i in range(LISTED_MOVES + 1)])
    assert "o" * SHOWN_ANSWER_CHARS + "... is not a legal move now" in text and len(text) < 300
    assert "m0" not in text and "legal move from the list" in text
    unparsed = correction_text(MoveCheck(None, False, "no_answer_tag"), ["a", "b"])
    assert unparsed.startswith("That reply was rejected (no_answer_tag). Legal moves: a, b.")


def test_a_self_play_opponent_that_fails_gets_a_random_move_not_a_forfeit():
    env = adapter("tic_tac_toe")
    match = Match(env.start_episode("tic_tac_toe", 1, 0), Opponent("self"), MatchRules(illegal_retries=0))
    verdicts = []
    while (turn := match.next_request()) is not None:
        reply = f"<answer>{turn.legal_moves[0]}</answer>" if turn.learner else "no idea"
        verdicts.append((turn.player, match.submit(reply)))
    assert {v for p, v in verdicts if p == 1} == {FALLBACK} and match.record.forfeit is None
    assert match.record.opponent_fallbacks == match.record.opponent_rejected == match.record.opponent_replies > 0
    assert match.record.result in ("win", "draw", "loss") and match.conversation(1)  # the opponent has its own chat


def test_compact_follow_ups_and_turn_messages():
    env = adapter("connect_four")
    match = Match(env.start_episode("connect_four", 2, 0), Opponent("random"),
                  MatchRules(illegal_retries=1, compact_followups=True))
    first = match.next_request()
    assert first.learner and first.attempt == 0 and "<answer>MOVE</answer>" in first.messages[0]["content"]
    match.submit(f"<answer>{first.legal_moves[0]}</answer>")
    second = match.next_request()
    assert "<answer>" not in second.messages[-1]["content"]  # later prompts drop the instructions
    assert "Legal moves" in second.messages[-1]["content"] and len(second.messages) == 3
    assert second.turn_messages == ({"role": "user", "content": match.episode.adapter.position_prompt(
        "connect_four", match.episode.state)},)  # a stateless policy gets the full single-move prompt
    match.submit("junk")
    retry = match.next_request()
    assert retry.attempt == 1 and len(retry.turn_messages) == 3 and retry.messages[-1]["role"] == "user"


def test_truncation_is_never_a_win_and_is_scored_as_configured():
    env = adapter("connect_four")
    match = Match(env.start_episode("connect_four", 0, 0), Opponent("random"), MatchRules(max_moves=4))
    _play(match, lambda turn: f"<answer>{turn.legal_moves[0]}</answer>")
    record = match.record
    assert record.truncated == "move_cap" and record.result is None and record.moves == 4
    assert outcome_value(record, 0.3) == 0.3
    metrics = game_metrics(record)
    assert metrics["truncated"] == 1.0 and metrics["win"] == metrics["draw"] == metrics["loss"] == 0.0
    match.truncate("response_budget")  # a finished record is not rewritten
    assert match.record.truncated == "move_cap"


def test_game_reward_terms():
    record = GameRecord("tic_tac_toe", 0, 0, "random", result="win", normalised_return=1.0, model_turns=4,
                        model_moves=3, format_ok=4, rejected=1, retries=1)
    plain = score_game(record, GameSettings())
    assert (plain.score, plain.outcome, plain.format_rate, plain.legal_rate) == (1.0, 1.0, 1.0, 0.75)
    weighted = score_game(record, GameSettings(format_weight=0.1, legal_weight=0.2))
    assert weighted.score == pytest.approx(0.7 * 1.0 + 0.1 * 1.0 + 0.2 * 0.75)
    draw = GameRecord("tic_tac_toe", 0, 0, "random", result="draw", normalised_return=0.5, model_turns=1,
                      model_moves=1, format_ok=1)
    assert score_game(draw, GameSettings()).score == 0.5
    forfeit = GameRecord("tic_tac_toe", 0, 0, "random", result="loss", forfeit="illegal_move", model_turns=1,
                         format_ok=1)
    assert score_game(forfeit, GameSettings(truncated_reward=0.9)).score == 0.0
    assert score_game(GameRecord("tic_tac_toe", 0, 0, "random", truncated="response_budget"),
                      GameSettings(legal_weight=0.5, truncated_reward=0.5)).score == 0.25  # no replies: no terms
    assert tuple(game_metrics(None)) == GAME_METRIC_KEYS and set(game_metrics(None).values()) == {0.0}
    assert GameRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record


@pytest.mark.parametrize("settings,message", [
    ({"game": {"opponent": "alphazero"}}, "data.env.openspiel.game.opponent: unknown opponent 'alphazero'"),
    ({"game": {"opponent": "mcts:0"}}, "needs a positive number of simulations"),
    ({"game": {"illegal_retries": -1}}, "game.illegal_retries: must be >= 0"),
    ({"game": {"max_tokens_per_turn": 0}}, "game.max_tokens_per_turn: must be > 0"),
    ({"game": {"truncated_reward": 1.5}}, "game.truncated_reward: must be in [0, 1]"),
    ({"game": {"format_weight": 0.5, "legal_weight": 0.5}},
     "format_weight + legal_weight + tactics_weight + value_weight: must be < 1"),
    ({"game": {"tactics_weight": 0.5, "value_weight": 0.5}}, "got 0.0 + 0.0 + 0.5 + 0.5"),
    ({"game": {"value_weight": -0.2}}, "game.value_weight: must be >= 0, got -0.2"),
    ({"task_mode": "game", "cases": ["connect_four"], "game": {"value_weight": 0.3}},
     "game.value_weight: no case of this run can be valued exactly ('connect_four': its games last up to 42"),
    ({"game": {"format_weight": 0.3, "tactics_weight": 0.7}}, "got 0.3 + 0.0 + 0.7 + 0.0"),
    ({"game": {"tactics_weight": -0.1}}, "game.tactics_weight: must be >= 0, got -0.1"),
    ({"game": {"tactics_weight": "high"}}, "game.tactics_weight: expected float, got 'high'"),
    ({"game": {"followup_prompt": "short"}}, "game.followup_prompt: unknown value 'short'"),
    ({"game": {"opponnent": "random"}}, "game: unknown key 'opponnent'"),
    ({"task_mode": "games"}, "task_mode: unknown value 'games'"),
    ({"task_mode": "mixed", "game_share": 1.0}, "game_share: must be in (0, 1)"),
    ({"task_mode": "game", "cases": ["hanabi(players=2)"], "game": {"opponent": "mcts:10"}},
     "game.opponent: 'mcts:10' cannot play 'hanabi(players=2)': per-step rewards"),
])
def test_bad_game_settings_name_the_key(settings, message):
    with pytest.raises(ConfigError) as err:
        make_env("openspiel", {"cases": ["tic_tac_toe"], **settings})
    assert message in str(err.value)


def test_opponent_strings():
    assert parse_opponent("mcts", "x") == Opponent("mcts", 200) and parse_opponent(" self ", "x").label == "self"
    assert parse_opponent("mcts:64", "x").label == "mcts:64" and not parse_opponent("self", "x").is_bot
    with pytest.raises(ConfigError, match="unknown opponent 'self'"):
        parse_opponent("self", "--opponents", allowed=("random", "mcts"))


def test_game_rows_in_the_mixture_and_what_exports_do_with_them():
    games = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe", "leduc_poker"], "task_mode": "game",
                                      "num_tasks_per_case": 4}})
    rows = [games.row(ref, "train", i) for i, ref in enumerate(games.plan("train"))]
    assert {r["agent_name"] for r in rows} == {GAME_AGENT_NAME}
    assert [r["extra_info"]["seat"] for r in rows[:4]] == [0, 1, 0, 1]  # seats alternate with the task index
    assert all(r["prompt"][0]["content"].startswith("You are playing") for r in rows)
    sft, skipped = build_rows(games, "train", "sft", progress=False)
    # an SFT row of a game is the engine's whole game (tests/test_game_demonstrations.py), leduc's too
    assert skipped == 0 and len(sft) == len(rows)
    assert all(len(r["messages"]) >= 2 and r["messages"][-1]["role"] == "assistant" for r in sft)
    mixed = EnvMixture({"openspiel": {"game_types": ["connect_four"], "task_mode": "mixed", "game_share": 0.25,
                                      "num_tasks_per_case": 400}})
    kinds = [mixed.row(ref, "train", 0)["agent_name"] for ref in mixed.plan("train")]
    assert set(kinds) == {GAME_AGENT_NAME, SINGLE_TURN_AGENT_NAME}  # every row names its loop in a mixture
    assert 0.18 < kinds.count(GAME_AGENT_NAME) / len(kinds) < 0.32
    assert kinds == [mixed.row(ref, "train", 0)["agent_name"] for ref in mixed.plan("train")]  # deterministic
    plain = EnvMixture({"openspiel": {"game_types": ["connect_four"], "num_tasks_per_case": 2}})
    assert "agent_name" not in plain.row(plain.plan("train")[0], "train", 0)  # single-move runs are unchanged


def test_compute_score_reads_the_played_game_and_refuses_a_game_row_without_one(caplog):
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "task_mode": "game",
                                        "num_tasks_per_case": 2, "game": {"legal_weight": 0.2}}})
    row = mixture.row(mixture.plan("train")[0], "train", 0)
    record = GameRecord("tic_tac_toe", 0, 0, "random", result="draw", normalised_return=0.5, model_turns=5,
                        model_moves=4, format_ok=5, rejected=1, retries=1, moves=9, model_tokens=40)
    info = {**row["extra_info"], RECORD_FIELD: record.to_dict()}
    scored = compute_score(row["data_source"], "the whole conversation", "", info)
    assert tuple(scored) == METRIC_KEYS and scored["failed"] == 0.0
    assert scored["score"] == pytest.approx(0.8 * 0.5 + 0.2 * 0.8) and scored["valid"] == pytest.approx(0.8)
    assert (scored["draw"], scored["game_moves"], scored["model_tokens"], scored["rejected_replies"]) == (
        1.0, 9.0, 40.0, 1.0)
    missing = compute_score(row["data_source"], "<answer>x(0,0)</answer>", "", row["extra_info"])
    assert missing["score"] == 0.0 and missing["failed"] == 1.0
    assert "agent_loop_config_path" in caplog.text


def test_budget_tool_counts_the_agent_loops_layout(tokenizer):
    env = adapter("tic_tac_toe", game={"followup_prompt": "full"})
    cost = game_cost(env, "tic_tac_toe", 0, 0, tokenizer, "<answer>{move}</answer>")
    assert 3 <= cost.model_turns <= 5 and cost.prompt_tokens > 20 and cost.response_tokens > cost.prompt_tokens
    compact = game_cost(env, "tic_tac_toe", 0, 0, tokenizer, "<answer>{move}</answer>", compact=True)
    assert compact.model_turns == cost.model_turns and compact.response_tokens < cost.response_tokens
    row = measure(["tic_tac_toe"], tokenizer, games=4, response_length=10)[0]
    assert row["games"] == 4 and row["fit_share"] == 0.0 and row["response_tokens_max"] >= row["response_tokens_mean"]
