"""CFR opponents (issue 47 item 3): OpenSpiel's CFR+ average policy solved once and cached as JSON
(verl_ext/envs/cfr_policy.py), `cfr` / `cfr:N` as a GAME_OPPONENT choice and an arena opponent, the bot sampling
that policy from the game-seeded RNG, and clear errors for games CFR is not offered for."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs import cfr_policy as cfr
from verl_ext.envs.episode import Opponent, parse_opponent
from verl_ext.envs.game_settings import GameSettings
from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter, parse_opponents
from verl_ext.evaluation.policies import ScriptedPolicy
from verl_ext.games.match import Match, MatchRules
from verl_ext.games.record_check import trusted_record
from verl_ext.mixture import EnvMixture

KEY = "data.env.openspiel.game.opponent"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own $VERL_EXT_CACHE and an empty in-process memory."""
    monkeypatch.setenv("VERL_EXT_CACHE", str(tmp_path / "cache"))
    cfr.forget_memory()
    yield tmp_path / "cache" / "cfr"
    cfr.forget_memory()


def game_adapter(cases: list[str], opponent: str):
    return make_env("openspiel", {"cases": cases, "task_mode": "game", "game": {"opponent": opponent}},
                    where="data.env.openspiel")


def test_cfr_is_solved_once_cached_as_json_and_far_less_exploitable_than_random(cache_dir: Path):
    game = pyspiel.load_game("kuhn_poker")
    started = time.perf_counter()
    first = cfr.cfr_policy("kuhn_poker", "cfr+", 300)
    solve_s = time.perf_counter() - started
    path = cache_dir / f"kuhn_poker-cfrplus-300-openspiel{cfr.open_spiel_version()}.json"
    assert first.source == "solved" and first.path == path and path.is_file()
    data = json.loads(path.read_text())
    assert (data["game"], data["solver"], data["iterations"], data["open_spiel"]) == (
        "kuhn_poker", "cfr+", 300, cfr.open_spiel_version())
    assert set(data["policy"]) == set(os_policy.TabularPolicy(game).state_lookup)  # 12 information states

    random_expl = exploitability.exploitability(game, os_policy.UniformRandomPolicy(game))
    cfr_expl = exploitability.exploitability(game, first.policy)
    assert random_expl == pytest.approx(0.4583, abs=1e-4)
    assert cfr_expl < 0.01 * random_expl  # measured 3.4e-4 at 300 CFR+ iterations

    assert cfr.cfr_policy("kuhn_poker", "cfr+", 300) is first  # the same process: from memory
    cfr.forget_memory()
    started = time.perf_counter()
    again = cfr.cfr_policy("kuhn_poker", "cfr+", 300)
    assert again.source == "cache" and time.perf_counter() - started < max(0.5, 2 * solve_s)
    # bit for bit: the solving process uses the table as the file gives it back
    np.testing.assert_array_equal(again.policy.action_probability_array, first.policy.action_probability_array)
    # another solver, iteration count or game parameter is another file
    assert cfr.cfr_policy("kuhn_poker", "cfr", 300).path.name.startswith("kuhn_poker-cfr-300-")
    other = cfr.cache_path("leduc_poker(suit_isomorphism=true)", "cfr+", 10)
    assert other.name.startswith("leduc_poker_suit_isomorphism_true-") and other.parent == cache_dir


def _corrupt_variants(text: str) -> dict[str, str]:
    data = json.loads(text)
    key = sorted(data["policy"])[0]
    edits = {
        "truncated": text[: len(text) // 2],
        "not an object": "[]",
        "other iterations": json.dumps({**data, "iterations": 299}),
        "other OpenSpiel": json.dumps({**data, "open_spiel": "0.0.1"}),
        "sums to 2": json.dumps({**data, "policy": {**data["policy"], key: [[0, 1.0], [1, 1.0]]}}),
        "negative": json.dumps({**data, "policy": {**data["policy"], key: [[0, 1.5], [1, -0.5]]}}),
        "NaN": json.dumps({**data, "policy": {**data["policy"], key: [[0, float("nan")], [1, 0.5]]}}),
        "an illegal action": json.dumps({**data, "policy": {**data["policy"], key: [[0, 0.5], [2, 0.5]]}}),
        "a missing state": json.dumps({**data, "policy": {k: v for k, v in data["policy"].items() if k != key}}),
        "an unknown state": json.dumps({**data, "policy": {**data["policy"], "xyz": [[0, 1.0]]}}),
    }
    return edits


def test_a_cache_file_that_does_not_match_is_solved_again_not_trusted(cache_dir: Path):
    good = cfr.cfr_policy("kuhn_poker", "cfr+", 300)
    text = good.path.read_text()
    expected = good.policy.action_probability_array
    for name, bad in _corrupt_variants(text).items():
        good.path.write_text(bad)
        cfr.forget_memory()
        rebuilt = cfr.cfr_policy("kuhn_poker", "cfr+", 300)
        assert rebuilt.source == "solved", name
        np.testing.assert_array_equal(rebuilt.policy.action_probability_array, expected, err_msg=name)
        assert cfr.read_cache(good.path, "kuhn_poker", "cfr+", 300) is not None  # the file was replaced
    with pytest.raises(ValueError, match="iterations is 300, expected 301"):
        cfr.read_cache(good.path, "kuhn_poker", "cfr+", 301)


def test_an_unwritable_cache_folder_still_gives_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    monkeypatch.setenv("VERL_EXT_CACHE", str(blocker))  # $VERL_EXT_CACHE/cfr cannot be created
    result = cfr.cfr_policy("kuhn_poker", "cfr+", 20)
    assert result.source == "solved" and not result.path.exists()


@pytest.mark.parametrize("text, label", [("cfr", "cfr:1000"), ("cfr:50", "cfr:50"), (" cfr:7 ", "cfr:7")])
def test_cfr_specs_parse(text: str, label: str):
    opponent = parse_opponent(text, KEY)
    assert opponent.kind == "cfr" and opponent.label == label and opponent.is_bot
    assert GameSettings(opponent=text).opponent_spec == opponent
    mixture = GameSettings(opponent="random:0.5,cfr:100:0.5").opponent_mixture
    assert mixture.opponents == (Opponent("random"), Opponent("cfr", iterations=100))
    assert parse_opponents("random,cfr:20") == [Opponent("random"), Opponent("cfr", iterations=20)]


@pytest.mark.parametrize("cases, opponent, message", [
    (["tic_tac_toe"], "cfr", "'cfr:1000' cannot play 'tic_tac_toe': tic_tac_toe is a perfect-information game"),
    (["hanabi(players=2)"], "random:0.5,cfr:10:0.5", "'cfr:10' cannot play 'hanabi(players=2)': hanabi is too big"),
    (["liars_dice"], "cfr", "liars_dice is too big to solve with tabular CFR here"),
    (["kuhn_poker(players=3)"], "cfr", "two-player games, 'kuhn_poker(players=3)' has 3 players"),
    (["kuhn_poker"], "cfr:0", "'cfr:0' needs a number of CFR iterations in 1..1000000"),
    (["kuhn_poker"], "cfr:x", "unknown opponent 'cfr:x' (use random, mcts:N, cfr:N, self"),
])
def test_cfr_for_a_game_it_does_not_support_is_a_config_error_naming_key_and_value(cases, opponent, message):
    with pytest.raises(ConfigError) as err:
        game_adapter(cases, opponent)
    assert str(err.value).startswith(KEY) and message in str(err.value)


def test_the_cfr_bot_samples_the_average_policy_with_the_game_seeded_rng():
    adapter = game_adapter(["kuhn_poker", "leduc_poker"], "cfr:200")
    opponent = adapter.game_settings.opponent_spec
    solved = cfr.cfr_policy("kuhn_poker", "cfr+", 200).policy
    after_pass: Counter = Counter()  # the bot (seat 1) holding the Jack after the learner passed: bluff or check
    for seed in range(400):
        episode = adapter.start_episode("kuhn_poker", seed, 0)
        episode.play("Pass")
        view = episode.state.information_state_string(1)
        probabilities = solved.action_probabilities(episode.state.clone(), 1)
        move = episode.play_bot(opponent)
        assert probabilities[{"Pass": 0, "Bet": 1}[move]] > 0  # never a move the policy does not play
        if view == "0p":
            after_pass[move] += 1
        replay = adapter.start_episode("kuhn_poker", seed, 0)
        replay.play("Pass")
        assert replay.play_bot(opponent) == move  # the same seed plays the same move
    n = sum(after_pass.values())
    bluff = solved.policy_for_key("0p")[1]
    assert n > 80 and abs(after_pass["Bet"] / n - bluff) < 4 * (bluff * (1 - bluff) / n) ** 0.5 + 0.01
    # a whole leduc_poker hand against the bot, the learner's seat alternating, each bot move legal
    for seed in range(6):
        episode = adapter.start_episode("leduc_poker", seed, seed % 2)
        while not episode.is_over():
            if episode.current_player() == episode.seat:
                episode.play_random()
            else:
                before = set(episode.legal_moves())
                assert episode.play_bot(opponent) in before
        assert sum(episode.returns()) == 0


def test_game_rows_and_records_name_the_cfr_opponent():
    mixture = EnvMixture({"openspiel": {"cases": ["kuhn_poker"], "task_mode": "game", "num_tasks_per_case": 4,
                                        "game": {"opponent": "cfr:50"}}})
    adapter = mixture.adapters["openspiel"]
    for ref in mixture.plan("train"):
        task = mixture.build(ref)
        assert task.info["opponent"] == "cfr:50"
        match = Match(adapter.start_episode(task.case, task.seed, task.info["seat"]), Opponent("cfr", iterations=50),
                      MatchRules(illegal_retries=0, max_moves=0))
        while (turn := match.next_request()) is not None:
            match.submit(f"<answer>{turn.legal_moves[0]}</answer>")
        record = trusted_record(json.loads(json.dumps(match.record.to_dict())), adapter.utility_range(task.case),
                                task.case, opponent="cfr:50")
        assert record.opponent == "cfr:50" and record.result in ("win", "loss")


def test_the_arena_plays_cfr_where_it_can_and_skips_the_rest():
    mixture = EnvMixture({"openspiel": {"cases": ["kuhn_poker", "tic_tac_toe"]}})
    arena = Arena(legal_adapter(mixture), ArenaSettings(games_per_case=4, opponents=(Opponent("cfr", iterations=50),)))
    results = arena.play(ScriptedPolicy("random", "random"), progress=False)
    assert [(m["case"], m["opponent"], m["games"]) for m in results["matches"]] == [("kuhn_poker", "cfr:50", 4)]
    assert results["skipped"] == [{"case": "tic_tac_toe", "opponent": "cfr:50",
                                   "reason": cfr.cfr_problem("tic_tac_toe")}]
    only_board = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"]}})
    with pytest.raises(ConfigError, match=r"--opponents: 'cfr:50' cannot play any configured case"):
        Arena(legal_adapter(only_board), ArenaSettings(opponents=(Opponent("cfr", iterations=50),)))
