"""compute_score never raises, keeps a fixed set of metric keys, and shares per-position work across a group."""

from __future__ import annotations

import random
import threading

import pytest

from verl_ext.envs.conformance import _alternative, hostile_responses
from verl_ext.envs.registry import cached_env
from verl_ext.mixture import EnvMixture
from verl_ext.reward import METRIC_KEYS, compute_score


@pytest.fixture(scope="module")
def rows():
    mixture = EnvMixture({"openspiel": {"game_types": ["chess", "hanabi", "leduc_poker"], "num_tasks_per_case": 2},
                          "logic": {"cases": ["knights_knaves"], "num_tasks_per_case": 2}})
    return [(mixture.row(ref, "train", i), mixture.build(ref), mixture.adapters[ref.env])
            for i, ref in enumerate(mixture.plan("train"))]


def _score(row, text, **kwargs):
    return compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"], **kwargs)


def test_fuzzed_outputs_never_raise_and_never_pay(rows):
    rng = random.Random(7)
    for row, task, adapter in rows:
        alternative = _alternative(adapter, task)  # hedging between this and the right answer must not pay
        junk = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 2000))).decode("latin-1") for _ in range(30)]
        for text in hostile_responses(task, rng, alternative) + junk:
            result = _score(row, text)
            assert tuple(result) == METRIC_KEYS
            assert result["failed"] == 0.0
            assert 0.0 <= result["score"] <= 0.1 + 1e-9


@pytest.mark.parametrize("extra_info", [None, {}, {"env": "openspiel"}, {"env": "nope", "case": "x", "state": ""},
                                        {"env": "openspiel", "case": "chess", "state": "not a FEN"},
                                        {"env": "openspiel", "case": "no_such_game", "state": "1"},
                                        {"env": "logic", "case": "knights_knaves", "state": "{broken json"},
                                        "a string", 42])
def test_broken_rows_score_zero_and_are_counted(extra_info):
    result = compute_score("openspiel/chess", "<answer>e4</answer>", "", extra_info)
    assert result["score"] == 0.0 and result["failed"] == 1.0
    assert tuple(result) == METRIC_KEYS


def test_verl_extra_keys_and_kwargs_are_tolerated(rows):
    row, task, _ = rows[0]
    info = dict(row["extra_info"], num_turns=2, rollout_reward_scores={})
    result = compute_score(row["data_source"], f"<answer>{task.legal_moves[0]}</answer>", "", info,
                           reward_router_address=None, reward_model_tokenizer=None)
    assert result["score"] == 1.0 and result["valid"] == 1.0


def test_env_overrides_switch_reward_mode():
    mixture = EnvMixture({"openspiel": {"game_types": ["chess"], "num_tasks_per_case": 1}})
    ref = mixture.plan("train")[0]
    row, task = mixture.row(ref, "train", 0), mixture.build(ref)
    text = f"<answer>{task.legal_moves[0]}</answer>"
    engine = _score(row, text, env_overrides={"openspiel": {"reward_mode": "engine", "mcts_simulations": 30}})
    assert engine["valid"] == 1.0 and 0.1 <= engine["score"] <= 1.0
    bad = _score(row, text, env_overrides={"openspiel": {"reward_mode": "bogus"}})
    assert bad["failed"] == 1.0
    # a setting the rows' cases cannot support fails (and is counted), it does not silently change games
    hanabi = EnvMixture({"openspiel": {"game_types": ["hanabi"], "num_tasks_per_case": 1}})
    hanabi_row = hanabi.row(hanabi.plan("train")[0], "train", 0)
    assert _score(hanabi_row, text, env_overrides={"openspiel": {"reward_mode": "engine"}})["failed"] == 1.0


def test_group_of_concurrent_samples_runs_the_analysis_once(monkeypatch):
    """16 samples of one prompt scored by 16 threads at once: one analysis of the position, shared."""
    mixture = EnvMixture({"openspiel": {"cases": ["connect_four"], "num_tasks_per_case": 1,
                                        "reward_mode": "engine", "mcts_simulations": 60}})
    ref = mixture.plan("train")[0]
    row, task = mixture.row(ref, "train", 0), mixture.build(ref)
    settings = mixture.settings["openspiel"]
    adapter = cached_env("openspiel", mixture.env_config_json("openspiel"))
    assert adapter.config.reward_mode == settings["reward_mode"]
    searches = []
    original = adapter._mcts_bot

    def counting_bot(game, seed, simulations=None):
        if simulations is None:  # the position's own search (moves it left unexplored get smaller ones)
            searches.append(1)
        return original(game, seed, simulations)

    monkeypatch.setattr(adapter, "_mcts_bot", counting_bot)
    results = [None] * 16
    barrier = threading.Barrier(16)

    def worker(i):
        barrier.wait()
        results[i] = _score(row, f"<answer>{task.legal_moves[i % len(task.legal_moves)]}</answer>")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(searches) == 1
    assert all(r["valid"] == 1.0 and r["failed"] == 0.0 for r in results)
    # the best move (per the shared analysis) earns the full reward
    best = adapter.best_move(task.case, task.state)
    assert _score(row, f"<answer>{best}</answer>")["score"] == pytest.approx(1.0)
