"""``system_prompt``: one system message first in every prompt of an env, in training rows, full-game turns, the
SFT export and eval alike; unset, prompts are as before (no system message)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from test_game_agent_loop import episodes, first_move, game_config, game_row, game_tokenizer, play  # noqa: F401
from test_train_scripts import overrides_of
from verl_ext.envs.config import ConfigError
from verl_ext.envs.registry import cached_env, make_env
from verl_ext.envs.system_prompt import with_system_prompt
from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter, parse_opponents
from verl_ext.export import build_rows
from verl_ext.launch.preflight import compose
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "You are a board-game and puzzle player. Reply with one <answer>...</answer>."
ENVS = {"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 3},
        "logic": {"cases": ["chain_sum"], "num_tasks_per_case": 3}, "val_tasks_per_case": 2}


def rows(section: dict, split: str = "train") -> list[dict]:
    mixture = EnvMixture(section)
    return [mixture.row(ref, split, i) for i, ref in enumerate(mixture.plan(split))]


def test_no_system_message_by_default():
    assert all(row["prompt"][0]["role"] == "user" for row in rows(ENVS) + rows(ENVS, "val"))
    assert all("system_prompt" not in row["extra_info"]["env_config"] for row in rows(ENVS))


def test_every_env_gets_the_system_message_and_an_env_can_have_its_own():
    for split in ("train", "val"):
        prompts = [row["prompt"] for row in rows({**ENVS, "system_prompt": SYSTEM}, split)]
        assert len(prompts) >= 4 and all(p[0] == {"role": "system", "content": SYSTEM} for p in prompts)
        assert all(len(p) == 2 and p[1]["role"] == "user" for p in prompts)
    own = {**ENVS, "system_prompt": SYSTEM, "logic": {**ENVS["logic"], "system_prompt": "Do sums."}}
    firsts = {row["extra_info"]["env"]: row["prompt"][0]["content"] for row in rows(own)}
    assert firsts == {"openspiel": SYSTEM, "logic": "Do sums."}


def test_the_reward_side_rebuilds_the_env_with_it_and_still_scores(monkeypatch):
    mixture = EnvMixture({**ENVS, "system_prompt": SYSTEM})
    for ref in mixture.plan("train")[:4]:
        row, task = mixture.row(ref, "train", 0), mixture.build(ref)
        adapter = cached_env(ref.env, row["extra_info"]["env_config"])
        assert adapter.system_prompt == SYSTEM  # type: ignore[attr-defined]
        answer = mixture.adapters[ref.env].reference_answer(task)
        assert compute_score(row["data_source"], answer, None, row["extra_info"])["score"] == 1.0


@pytest.mark.parametrize("section,where", [
    ({**ENVS, "system_prompt": 3}, "data.env.system_prompt: expected a string"),
    ({**ENVS, "logic": {**ENVS["logic"], "system_prompt": ["x"]}}, "data.env.logic.system_prompt: expected a string"),
    ({**ENVS, "system_prompt": "x" * 20_001}, "data.env.system_prompt: 20001 characters"),
])
def test_bad_values_name_the_key(section, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        EnvMixture(section)


def test_blank_is_none_and_an_existing_system_message_is_replaced():
    assert rows({**ENVS, "system_prompt": "  "})[0]["prompt"][0]["role"] == "user"
    chat = with_system_prompt([{"role": "system", "content": "old"}, {"role": "user", "content": "q"}], "new")
    assert chat == ({"role": "system", "content": "new"}, {"role": "user", "content": "q"})
    assert make_env("logic", {"cases": ["chain_sum"], "system_prompt": None}).system_prompt is None  # type: ignore


def test_sft_export_single_moves_and_game_demonstrations():
    moves, _ = build_rows(EnvMixture({**ENVS, "system_prompt": SYSTEM}), "train", "sft", progress=False)
    assert moves and all(r["messages"][0] == {"role": "system", "content": SYSTEM} for r in moves)
    assert all(r["messages"][-1]["role"] == "assistant" and r["prompt"][0]["role"] == "system" for r in moves)
    games = {"openspiel": {**ENVS["openspiel"], "task_mode": "game"}, "system_prompt": SYSTEM}
    demos, _ = build_rows(EnvMixture(games), "train", "sft", progress=False)
    assert demos and all(r["messages"][0]["content"] == SYSTEM and r["prompt"][0]["content"] == SYSTEM
                         for r in demos)
    assert all(sum(m["role"] == "system" for m in r["messages"]) == 1 for r in demos)


def test_full_game_turns_carry_it(game_tokenizer, episodes):  # noqa: F811
    config = game_config(game_tokenizer.name_or_path)
    with open_dict(config):
        config.data.env.system_prompt = SYSTEM
    row = game_row(config, "tic_tac_toe", 0)
    assert row["raw_prompt"][0]["content"] == SYSTEM
    output, record, server = play(config, game_tokenizer, row, first_move, episodes)
    assert record.done and server.calls
    opening = game_tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}], tokenize=False)
    for call in server.calls:  # every turn's prompt (the learner's and, with a random opponent, only it)
        text = game_tokenizer.decode(call.prompt_ids)
        assert text.startswith(opening) and text.count(SYSTEM) == 1
    assert game_tokenizer.decode(output.prompt_ids).startswith(opening)


def test_eval_arena_turns_carry_it():
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"]}, "system_prompt": SYSTEM})
    arena = Arena(legal_adapter(mixture), ArenaSettings(opponents=parse_opponents("random"), games_per_case=1))
    game = arena._new_game("tic_tac_toe", arena.settings.opponents[0], 0)
    request = arena._request(game, game.match.next_request())
    assert request.messages[0] == {"role": "system", "content": SYSTEM} and request.messages[-1]["role"] == "user"


@pytest.mark.parametrize("script,env", [("openspiel-ppo.sh", "openspiel"), ("logic-grpo.sh", "logic")])
def test_train_scripts_map_system_prompt(script, env):
    text = "It's a game: think, then answer ${not_an_interpolation} [1,2] \\ done"
    environ = {**os.environ, "SYSTEM_PROMPT": text, "RUN_PROFILE": "smoke", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(REPO / "train/scripts" / script), "--dry-run"], capture_output=True,
                         text=True, env=environ, cwd=REPO, check=True).stdout
    cfg = compose("ppo_trainer", overrides_of(shlex.split(out)))
    assert cfg.data.env.system_prompt == text
    row = rows(OmegaConf.to_container(cfg.data.env, resolve=True))[0]
    assert row["prompt"][0] == {"role": "system", "content": text} and row["extra_info"]["env"] == env
    unset = subprocess.run(["bash", str(REPO / "train/scripts" / script), "--dry-run"], capture_output=True, text=True,
                           env={**environ, "SYSTEM_PROMPT": ""}, cwd=REPO, check=True).stdout
    assert "system_prompt" not in unset
