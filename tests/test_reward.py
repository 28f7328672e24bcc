"""compute_score never raises, keeps a fixed set of metric keys, and shares per-position work across a group."""

from __future__ import annotations

import json
import random
import threading

import pytest

from verl_ext.envs.conformance import _alternative, hostile_responses
from verl_ext.envs.registry import cached_env
from verl_ext.mixture import EnvMixture
import verl_ext.reward as reward_module
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
    """16 samples of one prompt scored by 16 threads at once: one analysis of the position, shared (rows
    without the dataset's precomputed table, as with ``precompute_move_values: false``)."""
    mixture = EnvMixture({"openspiel": {"cases": ["connect_four"], "num_tasks_per_case": 1,
                                        "reward_mode": "engine", "mcts_simulations": 60,
                                        "precompute_move_values": False}})
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


@pytest.mark.parametrize("mode", ["engine", "outcome"])
def test_a_row_carries_its_move_values_and_the_reward_searches_nothing(monkeypatch, mode):
    """The dataset computes the per-move table once per prompt (in verl's dataloader workers); every reward
    worker then only looks it up, and scores exactly what it would have computed itself."""
    settings = {"cases": ["connect_four"], "num_tasks_per_case": 2, "reward_mode": mode, "mcts_simulations": 40,
                "outcome_playouts": 2, "seed": 3}
    mixture = EnvMixture({"openspiel": settings})
    ref = mixture.plan("train")[1]
    row, task = mixture.row(ref, "train", 1), mixture.build(ref)
    table = json.loads(row["extra_info"]["move_values"])
    assert len(table["values"]) == len(task.legal_moves) and table["settings"].startswith("v2|" + mode)
    replies = [f"<answer>{move}</answer>" for move in task.legal_moves]
    # the same settings without a precomputed table: the reward computes the values itself
    plain = EnvMixture({"openspiel": {**settings, "precompute_move_values": False}})
    plain_row = plain.row(plain.plan("train")[1], "train", 1)
    assert "move_values" not in plain_row["extra_info"]
    expected = [_score(plain_row, reply)["score"] for reply in replies]

    adapter = cached_env("openspiel", mixture.env_config_json("openspiel"))  # this test's own settings: fresh
    searched = []
    for cache in (adapter._analyses, adapter._outcomes):
        def spying(key, compute, original=cache.get_or_compute):
            return original(key, lambda: searched.append(key) or compute())
        monkeypatch.setattr(cache, "get_or_compute", spying)
    assert [_score(row, reply)["score"] for reply in replies] == expected
    assert searched == []  # every value came from the row


def test_a_table_computed_under_other_settings_is_not_used_and_a_broken_one_is_named(caplog, monkeypatch):
    # the reward logs its first 20 failures per process; tests run before this one in the same worker may have used them
    monkeypatch.setattr(reward_module, "_failures", 0)
    mixture = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 1,
                                        "reward_mode": "engine", "mcts_simulations": 50}})
    row = mixture.row(mixture.plan("train")[0], "train", 0)
    task = mixture.build(mixture.plan("train")[0])
    reply = f"<answer>{task.legal_moves[0]}</answer>"
    # a reward override (other simulations): the row's table does not apply, the reward computes its own
    overridden = _score(row, reply, env_overrides={"openspiel": {"mcts_simulations": 20}})
    assert overridden["failed"] == 0.0
    fresh = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 1, "reward_mode": "engine",
                                      "mcts_simulations": 20, "precompute_move_values": False}})
    assert overridden["score"] == _score(fresh.row(fresh.plan("train")[0], "train", 0), reply)["score"]
    broken = {**row, "extra_info": {**row["extra_info"], "move_values": '{"settings": 1}'}}
    with caplog.at_level("ERROR"):
        assert _score(broken, reply)["failed"] == 1.0
    assert "extra_info.move_values" in caplog.text


def test_one_column_is_one_answer_whoever_moves():
    """The collapse metrics count answers by answer_id: connect_four's x3 and o3 (column 3 for either player) are
    one favourite, different columns and an illegal reply are not."""
    mixture = EnvMixture({"openspiel": {"game_types": ["connect_four"], "num_tasks_per_case": 40}})
    by_mark: dict[str, tuple] = {}
    for i, ref in enumerate(mixture.plan("train")):
        task = mixture.build(ref)
        mark = task.legal_moves[0][0]
        if mark not in by_mark and f"{mark}3" in task.legal_moves and f"{mark}4" in task.legal_moves:
            by_mark[mark] = (mixture.row(ref, "train", i), mark)
    assert set(by_mark) == {"x", "o"}
    ids = {mark: {col: _score(row, f"<answer>{mark}{col}</answer>")["answer_id"] for col in (3, 4)}
           for mark, (row, _) in by_mark.items()}
    assert ids["x"][3] == ids["o"][3] != ids["x"][4] == ids["o"][4]
    x_row = by_mark["x"][0]
    illegal = _score(x_row, "<answer>o3</answer>")  # the other player's mark: not a legal move here
    assert illegal["valid"] == 0.0 and illegal["answer_id"] not in (ids["x"][3], 0.0)
