"""Opponent mixtures for full-game rows (opponent_mixture.py) and MCTS bots that break ties at random
(bot_ties.py): parsing and errors, the per-row draw, the records, and the bots' choices in tied positions."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest
import pyspiel
from open_spiel.python.algorithms import mcts

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs.bot_ties import TieBreakingMCTSBot, equally_good_actions
from verl_ext.envs.episode import Opponent, parse_opponent
from verl_ext.envs.game_settings import GameSettings
from verl_ext.envs.opponent_mixture import parse_opponent_list, parse_opponent_text
from verl_ext.games import RECORD_FIELD
from verl_ext.games.demonstration import demonstration_messages
from verl_ext.games.match import Match, MatchRules
from verl_ext.games.record_check import RecordError, trusted_record
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

KEY = "data.env.openspiel.game.opponent"
MIXTURE = "random:0.3,mcts:25:0.4,self:0.3"


def test_a_single_spec_is_the_old_opponent_whatever_the_seed():
    for text in ("random", "mcts", "mcts:50", " self "):
        mixture = parse_opponent_text(text, KEY)
        assert mixture.is_single and mixture.opponents == (parse_opponent(text, KEY),)
        assert {mixture.draw(seed) for seed in range(50)} == {parse_opponent(text, KEY)}
    assert GameSettings(opponent="mcts:50").opponent_spec == Opponent("mcts", 50)


def test_string_and_list_forms_give_the_same_mixture():
    text = parse_opponent_text(MIXTURE, KEY)
    listed = parse_opponent_list([{"spec": "random", "weight": 0.3}, {"spec": "mcts:25", "weight": 0.4},
                                  {"spec": "self", "weight": 0.3}], "game.opponents")
    assert text.opponents == listed.opponents == (Opponent("random"), Opponent("mcts", 25), Opponent("self"))
    assert text.shares() == pytest.approx({"random": 0.3, "mcts:25": 0.4, "self": 0.3})
    assert [text.draw(s) for s in range(200)] == [listed.draw(s) for s in range(200)]
    unweighted = parse_opponent_text("random,mcts:50", KEY)  # no weight: 1 each
    assert unweighted.shares() == {"random": 0.5, "mcts:50": 0.5}
    assert parse_opponent_list([{"spec": "mcts"}], "x").opponents == (Opponent("mcts", 200),)


def test_the_draw_follows_the_seed_and_the_weights():
    mixture = parse_opponent_text(MIXTURE, KEY)
    draws = [mixture.draw(seed) for seed in range(6000)]
    assert draws == [mixture.draw(seed) for seed in range(6000)]  # the same row meets the same opponent
    counts = Counter(o.label for o in draws)
    for label, share in mixture.shares().items():
        assert abs(counts[label] / len(draws) - share) < 0.025, (label, counts)
    never = parse_opponent_text("random:1,self:0", KEY)
    assert {never.draw(seed).label for seed in range(300)} == {"random"}  # a zero weight is never drawn


@pytest.mark.parametrize("game,message", [
    ({"opponent": "random:-0.3,self"}, f"{KEY}: weight '-0.3' of 'random:-0.3' must be a finite number >= 0"),
    ({"opponent": "random:0,self:0"}, f"{KEY}: the weights of 'random:0,self:0' are all zero"),
    ({"opponent": "random:0.5,alphazero:0.5"}, f"{KEY}: unknown opponent 'alphazero'"),
    ({"opponent": "random,mcts:0:0.5"}, f"{KEY}: 'mcts:0' needs a positive number of simulations"),
    ({"opponent": "mcts:0.4"}, f"{KEY}: unknown opponent 'mcts:0.4'"),
    ({"opponent": "random:x"}, f"{KEY}: weight 'x' of 'random:x' must be a number >= 0"),
    ({"opponent": "random:nan,self"}, f"{KEY}: weight 'nan' of 'random:nan' must be a finite number >= 0"),
    ({"opponent": "random,,self"}, f"{KEY}: empty opponent entry in 'random,,self'"),
    ({"opponent": "mcts:5:1:2"}, f"{KEY}: cannot read opponent entry 'mcts:5:1:2'"),
    ({"opponent": "random:0.5,random:0.5"}, f"{KEY}: opponent 'random' is listed twice"),
    ({"opponents": []}, "data.env.openspiel.game.opponents: expected a non-empty list"),
    ({"opponents": ["random"]}, "data.env.openspiel.game.opponents[0]: expected a mapping"),
    ({"opponents": [{"spec": "random", "wieght": 1}]}, "game.opponents[0]: unknown key 'wieght'"),
    ({"opponents": [{"weight": 1}]}, "game.opponents[0]: missing key 'spec'"),
    ({"opponents": [{"spec": "mcts:0"}]}, "game.opponents[0].spec: 'mcts:0' needs a positive number"),
    ({"opponents": [{"spec": "random", "weight": -1}]}, "game.opponents[0].weight: weight -1 of"),
    ({"opponents": [{"spec": "random", "weight": True}]}, "game.opponents[0].weight: weight True of"),
    ({"opponents": [{"spec": "random", "weight": 0}, {"spec": "self", "weight": 0.0}]},
     "data.env.openspiel.game.opponents: the weights of"),
])
def test_bad_mixtures_name_the_key_and_value(game, message):
    with pytest.raises(ConfigError) as err:
        make_env("openspiel", {"cases": ["tic_tac_toe"], "task_mode": "game", "game": game})
    assert message in str(err.value)


def test_every_opponent_of_a_mixture_must_be_able_to_play_every_case():
    with pytest.raises(ConfigError, match=r"game\.opponents\[1\]: 'mcts:10' cannot play 'hanabi\(players=2\)'"):
        make_env("openspiel", {"cases": ["hanabi(players=2)"], "task_mode": "game",
                               "game": {"opponents": [{"spec": "random"}, {"spec": "mcts:10"}]}})
    with pytest.raises(ConfigError, match=f"{KEY}: 'mcts:10' cannot play"):
        make_env("openspiel", {"cases": ["hanabi(players=2)"], "task_mode": "game",
                               "game": {"opponent": "random:1,mcts:10:1"}})
    with pytest.raises(ConfigError, match="is a mixture; the opponent of a game is opponent_for"):
        _ = GameSettings(opponent=MIXTURE).opponent_spec


def test_tasks_records_and_demonstrations_name_the_drawn_opponent():
    env = {"openspiel": {"game_types": ["tic_tac_toe"], "task_mode": "game", "num_tasks_per_case": 40,
                         "game": {"opponent": "random:1,mcts:5:1"}}}
    mixture = EnvMixture(env)
    tasks = [mixture.build(ref) for ref in mixture.plan("train")]
    labels = [t.info["opponent"] for t in tasks]
    assert set(labels) == {"random", "mcts:5"}
    fresh = EnvMixture(env)
    assert labels == [fresh.build(ref).info["opponent"] for ref in fresh.plan("train")]  # same rows, same draws
    adapter = mixture.adapters["openspiel"]
    settings = adapter.game_settings
    for task in tasks[:8]:
        seat = task.info["seat"]
        opponent = settings.opponent_for(task.seed)
        assert opponent.label == task.info["opponent"]
        match = Match(adapter.start_episode(task.case, task.seed, seat), opponent, MatchRules.from_settings(settings))
        while (turn := match.next_request()) is not None:
            match.submit(f"<answer>{turn.legal_moves[0]}</answer>")
        assert match.record.opponent == task.info["opponent"] and match.record.done
        assert demonstration_messages(adapter, task.case, task.seed, seat)


def test_the_reward_pays_a_record_only_against_the_rows_opponent_and_the_sample_log_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "run.samples.jsonl"))
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "task_mode": "game", "num_tasks_per_case": 12,
                                        "game": {"opponent": "random:1,mcts:5:1"}}})
    adapter = mixture.adapters["openspiel"]
    rows = [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]
    played = []
    for row in rows:
        info = row["extra_info"]
        opponent = adapter.game_settings.opponent_for(info["seed"])
        match = Match(adapter.start_episode(info["case"], info["seed"], info["seat"]), opponent, MatchRules())
        while (turn := match.next_request()) is not None:
            match.submit(f"<answer>{turn.legal_moves[-1]}</answer>")
        record = json.loads(json.dumps(match.record.to_dict()))
        assert compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: record})["failed"] == 0.0
        other = "random" if opponent.label == "mcts:5" else "mcts:5"
        claimed = compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: {**record, "opponent": other}})
        assert claimed["failed"] == 1.0 and claimed["score"] == 0.0  # a record against another opponent: refused
        played.append(opponent.label)
        if opponent.label == "mcts:5":
            mcts_game = (row, info, record)
    assert set(played) == {"random", "mcts:5"}
    lines = [json.loads(line) for line in (tmp_path / "run.samples.jsonl").read_text().splitlines()]
    assert [line["opponent"] for line in lines if line["failed"] == 0.0] == played  # told apart in the sample log
    # a reward override of the game settings (a shallow merge: `game` replaced, opponent back to random) does not
    # change which opponent the row's game was drawn against
    row, info, record = mcts_game
    overridden = compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: record},
                               env_overrides={"openspiel": {"game": {"legal_weight": 0.1}}})
    assert overridden["failed"] == 0.0
    with pytest.raises(RecordError, match=r"game record opponent='self': the row's game is against 'mcts:5'"):
        trusted_record({**record, "opponent": "self"}, adapter.utility_range("tic_tac_toe"), "tic_tac_toe", "mcts:5")


# ------------------------------------------------------------------ MCTS ties
def _three_wins() -> pyspiel.State:
    """tic_tac_toe, x to move with three winning moves (cells 2, 7 and 8)."""
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for action in (0, 3, 1, 5, 4, 6):
        state.apply_action(action)
    return state


def _mcts(seed: int, simulations: int = 25) -> mcts.MCTSBot:
    game = pyspiel.load_game("tic_tac_toe")
    evaluator = mcts.RandomRolloutEvaluator(1, np.random.RandomState(seed))
    return mcts.MCTSBot(game, 2.0, simulations, evaluator, solve=True, random_state=np.random.RandomState(seed))


def test_equally_good_children_are_the_best_outcome_or_the_best_visit_count():
    root = mcts.SearchNode(None, 0, 1.0)
    a, b, c, d = (mcts.SearchNode(action, 0, 0.25) for action in range(4))
    a.outcome, a.explore_count = [1.0, -1.0], 3       # proven win, more visits: OpenSpiel's best child
    b.outcome, b.explore_count = [1.0, -1.0], 1       # proven win too
    c.explore_count, c.total_reward = 9, 5.0          # unproven, most visits
    d.outcome, d.explore_count = [0.0, 0.0], 3        # proven draw
    root.children = [a, b, c, d]
    assert root.best_child() is a and equally_good_actions(root) == [0, 1]
    a.outcome = b.outcome = None                      # no proof: the visit count decides
    e = mcts.SearchNode(4, 0, 0.25)
    e.explore_count, e.total_reward = 9, 2.0          # as many visits as c, a lower summed return
    root.children = [a, b, c, d, e]
    assert root.best_child() is c and equally_good_actions(root) == [2, 4]


def test_tie_breaking_bot_varies_with_the_seed_among_the_best_moves_and_replays_one_seed():
    state = _three_wins()
    choices = [TieBreakingMCTSBot(_mcts(seed), random.Random(seed)).step(state.clone()) for seed in range(40)]
    assert set(choices) == {2, 7, 8}  # every winning move, nothing else
    assert min(Counter(choices).values()) >= 5
    assert choices == [TieBreakingMCTSBot(_mcts(seed), random.Random(seed)).step(state.clone())
                       for seed in range(40)]
    assert state.move_number() == 6  # the bot searches a copy; the game is not moved


def test_episode_bots_break_ties_per_game_seed():
    """In a game, the MCTS seat's tied choices follow the game's seed: varied over rows, fixed for one row."""
    env = make_env("openspiel", {"cases": ["tic_tac_toe"]})

    def first_bot_move(seed: int) -> str:
        episode = env.start_episode("tic_tac_toe", seed, 1)  # the bot opens
        return episode.play_bot(Opponent("mcts", 25))

    moves = [first_bot_move(seed) for seed in range(30)]
    assert moves == [first_bot_move(seed) for seed in range(30)]
    assert len(set(moves)) >= 3
    assert {first_bot_move(7)} == {first_bot_move(7) for _ in range(3)}


# ------------------------------------------------------------------ a mixture per case
BY_CASE = {"game_types": ["tic_tac_toe", "connect_four"], "task_mode": "game", "num_tasks_per_case": 60,
           "game": {"opponent": "random:1,mcts:5:1", "opponents_by_case": {"connect_four": "random:3,mcts:2:1"}}}


def test_a_case_of_its_own_draws_from_its_own_mixture_everywhere_the_opponent_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "run.samples.jsonl"))
    mixture = EnvMixture({"openspiel": BY_CASE})
    adapter = mixture.adapters["openspiel"]
    settings = adapter.game_settings
    rows = [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]
    labels: dict[str, Counter] = {"tic_tac_toe": Counter(), "connect_four": Counter()}
    for ref, row in zip(mixture.plan("train"), rows):
        info = row["extra_info"]
        label = settings.opponent_for(info["seed"], info["case"]).label
        labels[info["case"]][label] += 1
        assert mixture.build(ref).info["opponent"] == label  # the task names the opponent its game is drawn against
    assert set(labels["tic_tac_toe"]) == {"random", "mcts:5"}
    assert set(labels["connect_four"]) == {"random", "mcts:2"}  # never the shared mixture's mcts:5
    assert labels["connect_four"]["random"] > labels["connect_four"]["mcts:2"]  # weights 3 : 1
    assert settings.opponent_mixture_at("game", "connect_four").shares() == {"random": 0.75, "mcts:2": 0.25}
    assert settings.opponent_mixture_at("game", "tic_tac_toe").shares() == {"random": 0.5, "mcts:5": 0.5}

    # the game, its demonstration and the reward's record check all use the case's own mixture
    row = next(r for r in rows if r["extra_info"]["case"] == "connect_four"
               and settings.opponent_for(r["extra_info"]["seed"], "connect_four").label == "mcts:2")
    info = row["extra_info"]
    match = Match(adapter.start_episode(info["case"], info["seed"], info["seat"]),
                  settings.opponent_for(info["seed"], info["case"]), MatchRules.from_settings(settings))
    while (turn := match.next_request()) is not None:
        match.submit(f"<answer>{turn.legal_moves[0]}</answer>")
    record = json.loads(json.dumps(match.record.to_dict()))
    assert record["opponent"] == "mcts:2"
    assert compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: record})["failed"] == 0.0
    claimed = compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: {**record, "opponent": "mcts:5"}})
    assert claimed["failed"] == 1.0 and claimed["score"] == 0.0  # the shared mixture's bot is not this row's
    assert demonstration_messages(adapter, info["case"], info["seed"], info["seat"])


def test_a_list_per_case_is_the_same_mixture_as_its_string():
    as_list = {**BY_CASE, "game": {**BY_CASE["game"], "opponents_by_case": {
        "connect_four": [{"spec": "random", "weight": 3}, {"spec": "mcts:2"}]}}}
    one = make_env("openspiel", as_list).game_settings
    two = make_env("openspiel", BY_CASE).game_settings
    assert [one.opponent_for(s, "connect_four").label for s in range(200)] == \
        [two.opponent_for(s, "connect_four").label for s in range(200)]


@pytest.mark.parametrize("by_case, message", [
    ({"chess": "random"}, "game.opponents_by_case: 'chess' is not one of this run's cases (connect_four, tic_tac_toe)"),
    ({"connect_four": "alphazero"}, "game.opponents_by_case.connect_four: unknown opponent 'alphazero'"),
    ({"connect_four": "random:-1"}, "game.opponents_by_case.connect_four: weight '-1' of 'random:-1'"),
    ({"connect_four": 5}, "game.opponents_by_case.connect_four: expected an opponent string"),
    ({"connect_four": [{"spec": "mcts:0"}]}, "game.opponents_by_case.connect_four[0]"),
])
def test_bad_opponents_by_case_name_the_key_and_value(by_case, message):
    with pytest.raises(ConfigError) as err:
        make_env("openspiel", {**BY_CASE, "game": {**BY_CASE["game"], "opponents_by_case": by_case}})
    assert message in str(err.value)


def test_a_case_of_its_own_is_checked_against_its_game():
    with pytest.raises(ConfigError, match=r"opponents_by_case\.hanabi\(players=2\).*'mcts:10' cannot play"):
        make_env("openspiel", {"cases": ["tic_tac_toe", "hanabi(players=2)"], "task_mode": "game",
                               "game": {"opponent": "random", "opponents_by_case": {"hanabi(players=2)": "mcts:10"}}})
    # the shared mixture need not play a case that has its own
    env = make_env("openspiel", {"cases": ["tic_tac_toe", "hanabi(players=2)"], "task_mode": "game",
                                 "game": {"opponent": "mcts:10", "opponents_by_case": {"hanabi(players=2)": "random"}}})
    assert env.game_settings.opponent_for(3, "hanabi(players=2)").label == "random"
    assert env.game_settings.opponent_for(3, "tic_tac_toe").label == "mcts:10"
