"""One-ply tactics inside whole games: the record's counts, the reward term that pays them, the checks that bound
them, the per-step metrics and the arena's report (verl_ext/games/match.py, scoring.py, record_check.py)."""

from __future__ import annotations

import pytest

from verl_ext.envs import make_env
from verl_ext.envs.episode import Opponent
from verl_ext.envs.game_settings import GameSettings
from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter
from verl_ext.evaluation.policies import ScriptedPolicy
from verl_ext.evaluation.report import markdown
from verl_ext.games import RECORD_FIELD
from verl_ext.games.match import FORFEIT, GameRecord, Match, MatchRules
from verl_ext.games.record_check import RecordError, trusted_record
from verl_ext.games.scoring import score_game, tactics_rate
from verl_ext.group_stats import Reply, step_metrics
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

# x (the policy, seat 0) and o (self-play, driven by the test) on tic_tac_toe
BLOCK_SETUP = ["x(0,0)", "o(1,1)", "x(2,2)", "o(0,1)"]  # o threatens column 1 at (2,1); x has no win
WIN_SETUP = ["x(0,0)", "o(1,0)", "x(0,1)", "o(2,2)"]  # x wins at (0,2)


def _env():
    return make_env("openspiel", {"cases": ["tic_tac_toe"], "task_mode": "game"})


def _match(moves: list[str], retries: int = 0) -> Match:
    """A self-play match after ``moves``, the policy (x) to move next."""
    match = Match(_env().start_episode("tic_tac_toe", 0, 0), Opponent("self"), MatchRules(illegal_retries=retries))
    for move in moves:
        assert match.next_request() is not None
        assert match.submit(f"<answer>{move}</answer>") == "accepted"
    match.next_request()  # finishes a game that is over (the record's result); else the next turn waits
    return match


def _counts(record: GameRecord) -> tuple[int, int, int, int]:
    return record.win_chances, record.wins_taken, record.block_chances, record.blocks_made


def test_a_block_made_a_block_missed_and_a_win_taken_are_counted_for_the_policy_only():
    blocked = _match(BLOCK_SETUP + ["x(2,1)"])
    assert _counts(blocked.record) == (0, 0, 1, 1)
    missed = _match(BLOCK_SETUP + ["x(1,0)"])
    assert _counts(missed.record) == (0, 0, 1, 0)
    # o now takes (2,1): o's own win chance is not the policy's
    assert missed.next_request().player == 1 and missed.submit("<answer>o(2,1)</answer>") == "accepted"
    assert missed.next_request() is None
    assert missed.record.result == "loss" and _counts(missed.record) == (0, 0, 1, 0)
    won = _match(WIN_SETUP + ["x(0,2)"])
    assert won.record.result == "win" and _counts(won.record) == (1, 1, 0, 0)
    assert _counts(_match(WIN_SETUP + ["x(2,0)"]).record) == (1, 0, 0, 0)


def test_a_retry_counts_once_and_a_forfeit_at_a_threat_counts_as_a_block_missed():
    retried = _match(BLOCK_SETUP, retries=1)
    retried.next_request()
    assert retried.submit("<answer>x(0,0)</answer>") == "retry"
    retried.next_request()
    assert retried.submit("<answer>x(2,1)</answer>") == "accepted"
    assert _counts(retried.record) == (0, 0, 1, 1)
    forfeited = _match(BLOCK_SETUP)
    forfeited.next_request()
    assert forfeited.submit("maybe x(2,1) or x(1,0)") == FORFEIT
    assert _counts(forfeited.record) == (0, 0, 1, 0)
    # forfeiting at a threat must not look better to the tactics term than missing it
    settings = GameSettings(tactics_weight=0.3)
    missed = _match(BLOCK_SETUP + ["x(1,0)", "o(2,1)"])
    assert missed.record.result == "loss"
    assert score_game(forfeited.record, settings).score == score_game(missed.record, settings).score == 0.0


def test_the_tactics_share_pays_the_share_played_right_in_a_game_played_out():
    settings = GameSettings(tactics_weight=0.3)
    record = GameRecord("tic_tac_toe", 0, 0, "random", result="win", normalised_return=1.0, model_turns=4,
                        model_moves=4, format_ok=4, win_chances=1, wins_taken=1, block_chances=3, blocks_made=2)
    assert tactics_rate(record) == 0.75
    assert score_game(record, settings).score == pytest.approx(0.7 + 0.3 * 0.75)
    quiet = GameRecord("tic_tac_toe", 0, 0, "random", result="draw", normalised_return=0.5, model_turns=4,
                       model_moves=4, format_ok=4)
    assert score_game(quiet, settings).score == pytest.approx(0.7 * 0.5 + 0.3)  # nothing missed
    assert score_game(record, GameSettings()).score == 1.0  # off by default: the outcome alone
    # a won game with an unpunished missed block pays less than a clean win; a lost game pays for its blocks
    sloppy = GameRecord("tic_tac_toe", 0, 0, "random", result="win", normalised_return=1.0, model_turns=4,
                        model_moves=4, format_ok=4, block_chances=1)
    blocked_loss = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", normalised_return=0.0, model_turns=4,
                              model_moves=4, format_ok=4, block_chances=2, blocks_made=2)
    missed_loss = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", normalised_return=0.0, model_turns=3,
                             model_moves=3, format_ok=3, block_chances=1)
    assert score_game(record, settings).score > score_game(sloppy, settings).score == pytest.approx(0.7)
    assert score_game(blocked_loss, settings).score == pytest.approx(0.3)
    assert score_game(missed_loss, settings).score == 0.0


def _forfeit(chances: int = 0) -> GameRecord:
    return GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", forfeit="no_answer_tag", model_turns=2,
                      model_moves=1, format_ok=1, rejected=1, win_chances=0, block_chances=chances)


@pytest.mark.parametrize("tactics_weight", [0.0, 0.3, 0.9])
def test_ending_a_game_early_never_earns_from_the_tactics_share(tactics_weight):
    """The loophole GRPO found when the share paid every game (2026-11-28 night, one H200): a game forfeited before
    any one-ply chance kept the whole share, 0.30 against ~0.05 for a loss played out, and tic_tac_toe forfeits
    rose from 0 to 21 % of the training games. Now a forfeit or a truncated game earns what it earns without the
    term, never more than any game played out, and a loss played out earns at least what a forfeit does."""
    settings = GameSettings(tactics_weight=tactics_weight)
    truncated = GameRecord("tic_tac_toe", 0, 0, "random", truncated="response_budget", model_turns=1, format_ok=0)
    for record in (_forfeit(), _forfeit(chances=1), truncated):
        assert score_game(record, settings).score == 0.0
    paid = GameSettings(tactics_weight=tactics_weight, truncated_reward=0.5)
    assert score_game(truncated, paid).score == pytest.approx((1 - tactics_weight) * 0.5)
    worst_loss = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", normalised_return=0.0, model_turns=3,
                            model_moves=3, format_ok=3, block_chances=2)
    assert score_game(worst_loss, settings).score >= score_game(_forfeit(), settings).score


@pytest.mark.parametrize("counts,field", [
    ({"wins_taken": 2, "win_chances": 1}, "wins_taken"),
    ({"blocks_made": 1}, "blocks_made"),
    ({"win_chances": 3, "block_chances": 3}, "win_chances + block_chances"),
    ({"block_chances": -1}, "block_chances"),
    ({"blocks_made": 1.5, "block_chances": 2}, "blocks_made"),
    ({"win_chances": "many"}, "win_chances"),
])
def test_the_reward_refuses_tactics_counts_the_turns_cannot_hold(counts, field):
    assert refused_field(counts) == field


def refused_field(counts: dict) -> str:
    """The field the reward's record check names when a won tic_tac_toe game of 5 moves by the policy carries
    ``counts``."""
    data = {"case": "tic_tac_toe", "seed": 0, "seat": 0, "opponent": "random", "result": "win", "returns": [1.0, -1.0],
            "normalised_return": 1.0, "moves": 9, "model_turns": 5, "model_moves": 5, "format_ok": 5, **counts}
    with pytest.raises(RecordError) as err:
        trusted_record(data, _env().utility_range("tic_tac_toe"), "tic_tac_toe")
    return err.value.field


def test_a_forfeited_turn_may_hold_a_chance_and_the_checked_record_keeps_the_counts():
    env = _env()
    data = {"case": "tic_tac_toe", "seed": 0, "seat": 0, "opponent": "random", "result": "loss",
            "forfeit": "no_answer_tag", "moves": 4, "model_turns": 3, "model_moves": 2, "format_ok": 2,
            "rejected": 1, "win_chances": 1, "wins_taken": 1, "block_chances": 2, "blocks_made": 1,
            "normalised_return": None}
    record = trusted_record(data, env.utility_range("tic_tac_toe"), "tic_tac_toe")
    assert _counts(record) == (1, 1, 2, 1)


def test_compute_score_pays_the_tactics_weight_and_reports_the_counts():
    env_config = '{"cases": ["tic_tac_toe"], "task_mode": "game"}'
    record = GameRecord("tic_tac_toe", 3, 0, "random", result="win", returns=[1.0, -1.0], normalised_return=1.0,
                        moves=7, model_turns=4, model_moves=4, format_ok=4, block_chances=2, blocks_made=1)
    info = {"env": "openspiel", "env_config": env_config, "mode": "game", "case": "tic_tac_toe", "seat": 0,
            RECORD_FIELD: record.to_dict()}
    plain = compute_score("openspiel", "", None, info)
    weighted = compute_score("openspiel", "", None, info, env_overrides={"openspiel": {"game": {
        "tactics_weight": 0.4}}})
    assert plain["score"] == 1.0 and weighted["score"] == pytest.approx(0.6 + 0.4 * 0.5)
    assert (weighted["block_chance"], weighted["blocked"], weighted["win_chance"]) == (2.0, 1.0, 0.0)
    assert weighted["failed"] == 0.0


def test_step_metrics_sum_game_counts_with_single_move_flags():
    replies = [Reply("g1", 1.0, case="tic_tac_toe", block_chance=3.0, blocked=2.0, win_chance=1.0, win_taken=1.0),
               Reply("g1", 0.0, case="tic_tac_toe", block_chance=1.0, blocked=0.0, win_chance=0.0, win_taken=0.0),
               Reply("g2", 0.5, case="tic_tac_toe", block_chance=1.0, blocked=1.0, win_chance=1.0, win_taken=0.0),
               # hostile extras: more blocked than chances, NaN: counted no further than the chances
               Reply("g2", 0.2, case="tic_tac_toe", block_chance=1.0, blocked=9.0, win_chance=float("nan"))]
    metrics = step_metrics(replies)
    assert metrics["tactics/block_chances"] == 6.0 and metrics["tactics/blocked"] == pytest.approx(4 / 6)
    assert metrics["tactics/win_chances"] == 2.0 and metrics["tactics/win_taken"] == 0.5
    assert metrics["tactics/blocked/tic_tac_toe"] == pytest.approx(4 / 6)


def test_the_arena_reports_the_games_tactics():
    adapter = legal_adapter(EnvMixture({"openspiel": {"cases": ["tic_tac_toe"]}}))
    arena = Arena(adapter, ArenaSettings(games_per_case=40, opponents=(Opponent("random"),), seed=3))
    results = arena.play(ScriptedPolicy("random", "random"), progress=False)
    match = results["matches"][0]
    tactics = match["tactics"]
    assert tactics["blocked"]["n"] > 0 and tactics["win_taken"]["n"] > 0
    # a random mover takes a win or blocks a threat now and then, not always
    assert 0.0 < tactics["blocked"]["rate"] < 1.0 and 0.0 < tactics["win_taken"]["rate"] < 1.0
    text = markdown({"settings": {"seed": 3, "confidence": 0.95, "games_per_case": 20},
                     "models": {"random": {"arena": results}}})
    assert "One-ply tactics in the games" in text and "random: blocked" in text


class _BrokenTactics:
    """An adapter whose episodes claim a block on a forfeit: the conformance suite must refuse it."""

    def __init__(self, adapter):
        self._adapter = adapter

    def __getattr__(self, name):
        return getattr(self._adapter, name)

    def start_episode(self, case, seed, seat):
        episode = self._adapter.start_episode(case, seed, seat)
        real = episode.move_tactics
        episode.move_tactics = lambda move: ({"win_chance": 0.0, "win_taken": 0.0, "block_chance": 1.0,
                                              "blocked": 1.0} if move is None else real(move))
        return episode


def test_the_episodes_tactical_moves_are_the_win_or_the_block():
    assert _match(WIN_SETUP).episode.tactical_moves() == ("x(0,2)",)
    assert _match(BLOCK_SETUP).episode.tactical_moves() == ("x(2,1)",)
    quiet = _match([]).episode
    assert quiet.tactical_moves() == quiet.legal_moves()  # no tactic: every move
    over = _match([*WIN_SETUP, "x(0,2)"])
    assert over.episode.is_over() and over.episode.tactical_moves() == ()


class _BrokenTacticalMoves(_BrokenTactics):
    """An adapter whose episodes name every legal move tactical, the moves that lose at once included."""

    def start_episode(self, case, seed, seat):
        episode = self._adapter.start_episode(case, seed, seat)
        episode.tactical_moves = episode.legal_moves
        return episode


def test_the_episode_conformance_suite_checks_move_tactics():
    from verl_ext.envs.conformance import ConformanceError, check_episodes

    env = _env()
    check_episodes(env, "tic_tac_toe")
    with pytest.raises(ConformanceError, match="move_tactics"):
        check_episodes(_BrokenTactics(env), "tic_tac_toe")
    with pytest.raises(ConformanceError, match="tactical move"):
        check_episodes(_BrokenTacticalMoves(env), "tic_tac_toe", seeds=tuple(range(8)))
