"""Bad configuration fails at construction and the error names the key and the value."""

import pytest

from verl_ext.envs import ConfigError, make_env
from verl_ext.mixture import EnvMixture, parse_split


@pytest.mark.parametrize("env,settings,pattern", [
    ("openspiel", {"cases": ["no_such_game"]}, r"data\.env\.openspiel\.cases\[0\].*'no_such_game'"),
    ("openspiel", {"cases": ["hex(board_size=7"]}, r"cases\[0\].*'hex\(board_size=7'"),
    ("openspiel", {"cases": ["hex(board_sise=7)"]}, r"cases\[0\].*board_sise"),
    ("openspiel", {"num_tasks_per_case": 0}, r"num_tasks_per_case: must be > 0, got 0"),
    ("openspiel", {"num_tasks_per_case": -3}, r"num_tasks_per_case: must be > 0, got -3"),
    ("openspiel", {"reward_mode": "win"}, r"reward_mode: unknown value 'win'"),
    ("openspiel", {"continuation": "alphazero"}, r"continuation: unknown value 'alphazero'"),
    ("openspiel", {"game_types": ["hexx"]}, r"game_types: 'hexx' matches no case"),
    ("openspiel", {"gmae_types": ["hex"]}, r"unknown key 'gmae_types'"),
    ("openspiel", {"num_tasks_per_case": "many"}, r"num_tasks_per_case: expected int, got 'many'"),
    ("openspiel", {"cases": ["hanabi(players=2)"], "reward_mode": "engine"}, r"reward_mode: 'engine'.*hanabi"),
    ("openspiel", {"game_list": ["hex"], "game_configs": [{}, {}]}, r"game_configs: has 2 entries"),
    ("openspiel", {"cases": ["hex"], "game_list": ["go"]}, r"either 'cases' or 'game_list'"),
    ("logic", {"cases": ["no_such_puzzle"]}, r"data\.env\.logic\.cases: unknown reasoning-gym dataset 'no_such_puzzle'"),
    ("logic", {"cases": {"mini_sudoku": {"no_such_option": 1}}}, r"logic\.cases\.mini_sudoku: invalid options"),
    ("logic", {"num_tasks_per_case": 0}, r"num_tasks_per_case: must be > 0, got 0"),
    ("chess960", {}, r"unknown env 'chess960'"),
])
def test_bad_settings_name_key_and_value(env, settings, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make_env(env, settings)


def test_game_types_env_variable(monkeypatch):
    monkeypatch.setenv("GAME_TYPES", "hex,go")
    cases = make_env("openspiel", {}).cases()
    assert cases == ["hex(board_size=7)", "go(board_size=9)"]
    monkeypatch.setenv("GAME_TYPES", "hexx")
    with pytest.raises(ConfigError, match=r"GAME_TYPES: 'hexx' matches no case"):
        make_env("openspiel", {})


def test_game_list_with_configs_makes_one_case_per_pair():
    adapter = make_env("openspiel", {"game_list": ["hex", "breakthrough"],
                                     "game_configs": [{"board_size": 5}, {"rows": 6, "columns": 6}]})
    assert adapter.cases() == ["hex(board_size=5)", "breakthrough(columns=6,rows=6)"]


@pytest.mark.parametrize("section,pattern", [
    ({}, r"data\.env: no env configured"),
    ({"openspeil": {}}, r"data\.env: unknown key or env 'openspeil'"),
    ({"openspiel": {}, "weights": {"logic": 1}}, r"data\.env\.weights\.logic: no such env configured"),
    ({"openspiel": {}, "weights": {"openspiel": 0}}, r"weights\.openspiel: must be > 0"),
    ({"openspiel": {}, "size": -1}, r"data\.env\.size: expected a positive integer, got -1"),
    ({"openspiel": {}, "val_tasks_per_case": 0}, r"val_tasks_per_case: expected a positive integer, got 0"),
])
def test_bad_mixture(section, pattern):
    with pytest.raises(ConfigError, match=pattern):
        EnvMixture(section)


@pytest.mark.parametrize("files", ["data/train.parquet", ["env://train", "env://val"], "env://test", None])
def test_data_files_must_name_a_split(files):
    with pytest.raises(ConfigError, match="env://train"):
        parse_split(files)
