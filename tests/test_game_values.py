"""The exact-value term of whole games (``game.value_weight``): the record's counts of the policy's moves that kept
the position's value under best play, the reward share that pays them, the checks that bound them, the per-step
metric and the conformance check (verl_ext/envs/exact_values.py, games/match.py, scoring.py, record_check.py)."""

from __future__ import annotations

import pytest

from verl_ext.envs import make_env
from verl_ext.envs.config import ConfigError
from verl_ext.envs.episode import Opponent
from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.game_settings import GameSettings
from verl_ext.envs.openspiel_rules import load_game
from verl_ext.games import RECORD_FIELD
from verl_ext.games.match import GameRecord, Match, MatchRules
from verl_ext.games.scoring import score_game, value_rate
from verl_ext.group_stats import Reply, step_metrics
from verl_ext.reward import compute_score

from test_game_tactics import _BrokenTactics, refused_field

# x (the policy, seat 0) opens in the corner; against it only the centre keeps o's draw
CORNER = "x(0,0)"


def _env(cases: tuple[str, ...] = ("tic_tac_toe",), **game):
    return make_env("openspiel", {"cases": list(cases), "task_mode": "game", "game": game})


def _self_play(moves: list[str], seat: int = 0, retries: int = 0) -> Match:
    """A self-play tic_tac_toe match (the policy in ``seat``) after ``moves``."""
    match = Match(_env().start_episode("tic_tac_toe", 0, seat), Opponent("self"), MatchRules(illegal_retries=retries))
    for move in moves:
        assert match.next_request() is not None
        assert match.submit(f"<answer>{move}</answer>") == "accepted"
    match.next_request()
    return match


def test_only_the_moves_that_keep_the_value_keep_it():
    game = load_game("tic_tac_toe")
    state = game.new_initial_state()
    assert best_actions("tic_tac_toe", state) == frozenset(state.legal_actions())  # a draw everywhere
    state.apply_action(0)  # x in the corner
    assert best_actions("tic_tac_toe", state) == {4}  # o: the centre only
    assert best_actions("connect_four", load_game("connect_four").new_initial_state()) is None  # too long to search
    for action in (4, 1, 8, 2):  # ... x completes the top row
        state.apply_action(action)
    assert state.is_terminal() and best_actions("tic_tac_toe", state) is None  # a finished game has no move to value


def test_the_record_counts_the_policys_valued_turns_only():
    # the policy is o (seat 1): after the corner, an edge loses the drawn position; the centre keeps it
    lost = _self_play([CORNER, "o(0,1)"], seat=1)
    assert (lost.record.value_turns, lost.record.values_kept) == (1, 0)
    kept = _self_play([CORNER, "o(1,1)"], seat=1)
    assert (kept.record.value_turns, kept.record.values_kept) == (1, 1)
    # x's moves are the opponent's here: not counted
    assert _self_play([CORNER], seat=1).record.value_turns == 0


def test_a_forfeited_turn_counts_as_a_value_lost():
    match = _self_play([CORNER], seat=1)
    assert match.next_request().player == 1
    assert match.submit("no answer") == "forfeit"
    assert (match.record.value_turns, match.record.values_kept) == (1, 0)


def test_a_game_too_long_to_search_has_no_valued_turns():
    env = _env(("connect_four",))
    match = Match(env.start_episode("connect_four", 0, 0), Opponent("random"), MatchRules())
    for _ in range(3):
        request = match.next_request()
        if request is None:
            break
        match.submit(f"<answer>{request.legal_moves[0]}</answer>")
    assert match.record.model_moves >= 1 and match.record.value_turns == 0


def test_the_value_share_pays_the_moves_kept_in_a_valued_game_played_out():
    settings = GameSettings(value_weight=0.3, tactics_weight=0.2)
    record = GameRecord("tic_tac_toe", 0, 1, "random", result="win", normalised_return=1.0, model_turns=4,
                        model_moves=4, format_ok=4, value_turns=4, values_kept=3)
    assert value_rate(record) == 0.75
    assert score_game(record, settings, valued=True).score == pytest.approx(0.5 + 0.2 + 0.3 * 0.75)
    # a game that cannot be valued: the share pays the outcome
    assert score_game(record, settings, valued=False).score == pytest.approx(0.8 + 0.2)
    lost_value_draw = GameRecord("tic_tac_toe", 0, 1, "random", result="draw", normalised_return=0.5, model_turns=4,
                                 model_moves=4, format_ok=4, value_turns=4, values_kept=2)
    kept_value_draw = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="draw", normalised_return=0.5, model_turns=4,
                                 model_moves=4, format_ok=4, value_turns=4, values_kept=4)
    assert score_game(kept_value_draw, settings, valued=True).score > score_game(
        lost_value_draw, settings, valued=True).score


@pytest.mark.parametrize("value_weight", [0.3, 0.9])
def test_ending_a_game_early_never_earns_from_the_value_share(value_weight):
    settings = GameSettings(value_weight=value_weight)
    forfeit = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", forfeit="no_answer_tag", model_turns=1,
                         value_turns=1)
    truncated = GameRecord("tic_tac_toe", 0, 0, "random", truncated="response_budget", model_turns=1)
    worst_loss = GameRecord("tic_tac_toe", 0, 1, "mcts:50", result="loss", normalised_return=0.0, model_turns=3,
                            model_moves=3, format_ok=3, value_turns=3)
    for record in (forfeit, truncated):
        assert score_game(record, settings, valued=True).score == 0.0
    assert score_game(worst_loss, settings, valued=True).score >= 0.0


@pytest.mark.parametrize("counts,field", [
    ({"values_kept": 2, "value_turns": 1}, "values_kept"),
    ({"value_turns": 6}, "value_turns"),
    ({"value_turns": -1}, "value_turns"),
    ({"values_kept": "all"}, "values_kept"),
])
def test_the_reward_refuses_value_counts_the_turns_cannot_hold(counts, field):
    assert refused_field(counts) == field


def test_compute_score_pays_the_value_weight_where_the_game_can_be_valued():
    def row(case: str) -> dict:
        valued = case == "tic_tac_toe"
        record = GameRecord(case, 3, 0, "random", result="win", returns=[1.0, -1.0], normalised_return=1.0,
                            moves=7, model_turns=4, model_moves=4, format_ok=4,
                            value_turns=4 if valued else 0, values_kept=2 if valued else 0)
        env_config = '{"cases": ["tic_tac_toe", "connect_four"], "task_mode": "game"}'
        return {"env": "openspiel", "env_config": env_config, "mode": "game", "case": case, "seat": 0,
                RECORD_FIELD: record.to_dict()}

    overrides = {"openspiel": {"game": {"value_weight": 0.4}}}
    tic_tac_toe = compute_score("openspiel", "", None, row("tic_tac_toe"), env_overrides=overrides)
    connect_four = compute_score("openspiel", "", None, row("connect_four"), env_overrides=overrides)
    assert tic_tac_toe["score"] == pytest.approx(0.6 + 0.4 * 0.5) and tic_tac_toe["failed"] == 0.0
    assert (tic_tac_toe["value_turns"], tic_tac_toe["values_kept"]) == (4.0, 2.0)
    assert connect_four["score"] == 1.0  # no exact values: the outcome keeps the whole reward
    assert compute_score("openspiel", "", None, row("tic_tac_toe"))["score"] == 1.0  # off by default


def test_a_run_whose_games_cannot_be_valued_refuses_the_value_weight():
    assert _env(("tic_tac_toe", "connect_four"), value_weight=0.3).values_exactly("tic_tac_toe")
    with pytest.raises(ConfigError, match="game.value_weight: no case of this run can be valued exactly"):
        _env(("connect_four",), value_weight=0.3)


def test_step_metrics_report_the_share_of_valued_turns_kept():
    replies = [Reply("g1", 1.0, case="tic_tac_toe", value_turns=4.0, values_kept=3.0),
               Reply("g1", 0.0, case="tic_tac_toe", value_turns=3.0, values_kept=1.0),
               Reply("g2", 0.5, case="connect_four", value_turns=0.0, values_kept=0.0),
               Reply("g2", 0.2, case="tic_tac_toe", value_turns=1.0, values_kept=5.0)]  # hostile: capped at 1
    metrics = step_metrics(replies)
    assert metrics["value/turns"] == 8.0 and metrics["value/kept"] == pytest.approx(5 / 8)
    assert metrics["value/kept/tic_tac_toe"] == pytest.approx(5 / 8) and "value/kept/connect_four" not in metrics


def test_the_plot_draws_the_value_kept_per_case(tmp_path):
    import json

    from verl_ext.plot import main as plot_main

    metrics = tmp_path / "run.metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": step, "data": {"critic/score/mean": 0.5,
                                                                  "value/kept/tic_tac_toe": 0.5 + 0.1 * step}}) + "\n"
                               for step in (1, 2)))
    assert plot_main([str(metrics), "--out", str(tmp_path / "plots"), "--kind", "grpo"]) == 0
    panels = json.loads(next((tmp_path / "plots").glob("*.json")).read_text())["panels"]
    lines = panels["whole games: moves that kept the position's value (exact)"]["lines"]
    assert lines == {"tic_tac_toe": [[1, pytest.approx(0.6)], [2, pytest.approx(0.7)]]}


class _BrokenValues(_BrokenTactics):
    """An adapter whose episodes say a forfeited turn kept the value."""

    def start_episode(self, case, seed, seat):
        episode = self._adapter.start_episode(case, seed, seat)
        real = episode.move_keeps_value
        episode.move_keeps_value = lambda move: True if move is None else real(move)
        return episode


def test_the_episode_conformance_suite_checks_move_keeps_value():
    from verl_ext.envs.conformance import ConformanceError, check_episodes

    check_episodes(_env(), "tic_tac_toe")
    with pytest.raises(ConformanceError, match="move_keeps_value"):
        check_episodes(_BrokenValues(_env()), "tic_tac_toe")


def test_the_arena_reports_the_share_of_moves_that_kept_the_value():
    from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter
    from verl_ext.evaluation.policies import ScriptedPolicy
    from verl_ext.evaluation.report import markdown
    from verl_ext.mixture import EnvMixture

    adapter = legal_adapter(EnvMixture({"openspiel": {"cases": ["tic_tac_toe", "connect_four"]}}))
    arena = Arena(adapter, ArenaSettings(games_per_case=10, opponents=(Opponent("random"),), seed=3))
    results = arena.play(ScriptedPolicy("random", "random"), progress=False)
    by_case = {match["case"]: match["tactics"] for match in results["matches"]}
    assert 0.0 < by_case["tic_tac_toe"]["value_kept"]["rate"] < 1.0  # a random mover gives the value away at times
    assert by_case["connect_four"]["value_kept"] is None  # too long to search
    text = markdown({"settings": {"seed": 3, "confidence": 0.95, "games_per_case": 10},
                     "models": {"random": {"arena": results}}})
    assert "random: kept the value" in text and "kept the position's value under best play" in text
