"""Contract tests against the installed verl 0.9.1 (no mocks): its config, dataset loader, collate_fn,
DataProto and reward loop worker drive our DynamicEnvDataset and compute_score."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import verl
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.trainer.ppo.utils import create_rl_dataset
from verl.utils.dataset.rl_dataset import collate_fn, get_dataset_class

from verl_ext.dataset import DynamicEnvDataset
from verl_ext.reward import METRIC_KEYS

ENV_OVERRIDES = [
    "+data.env.openspiel.game_types=[hex,leduc_poker]",
    "+data.env.openspiel.num_tasks_per_case=6",
    "+data.env.logic.cases=[mini_sudoku]",
    "+data.env.logic.num_tasks_per_case=4",
    "+data.env.val_tasks_per_case=2",
]


def compose_verl_config(overrides: list[str]):
    """verl's own Hydra config (verl/trainer/config/ppo_trainer.yaml) with our overrides."""
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def config(tokenizer_dir):
    return compose_verl_config([
        "data.custom_cls.path=pkg://verl_ext.dataset",
        "data.custom_cls.name=DynamicEnvDataset",
        "data.train_files=env://train",
        "data.val_files=env://val",
        "data.max_prompt_length=1024",
        "reward.custom_reward_function.path=pkg://verl_ext.reward",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        *ENV_OVERRIDES,
    ])


def test_verl_loads_our_dataset_class(config, tokenizer):
    assert get_dataset_class(config.data) is DynamicEnvDataset
    train = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
    val = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
    assert isinstance(train, DynamicEnvDataset) and train.split == "train" and val.split == "val"
    assert len(train) == 2 * 6 + 4 and len(val) == 3 * 2
    limited = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, max_samples=5)
    assert len(limited) == 5


def test_items_batch_with_verl_collate_fn(config, tokenizer):
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    batch = next(iter(DataLoader(dataset, batch_size=8, shuffle=False, collate_fn=collate_fn)))
    assert batch["dummy_tensor"].shape == (8, 1)
    for key in ("raw_prompt", "data_source", "reward_model", "extra_info", "index", "tools_kwargs"):
        assert isinstance(batch[key], np.ndarray) and batch[key].shape == (8,), key
    info = batch["extra_info"][0]
    assert {"env", "case", "task_id", "state", "index", "env_config", "seed", "split"} <= set(info)
    assert batch["raw_prompt"][0][0]["role"] == "user"
    assert batch["data_source"][0].startswith("openspiel/")
    assert isinstance(batch["reward_model"][0]["ground_truth"], str)
    # the chat prompt tokenises with the model's template, as verl's agent loop will do
    ids = tokenizer.apply_chat_template(list(batch["raw_prompt"][0]), add_generation_prompt=True, tokenize=True)
    assert 0 < len(ids["input_ids"] if hasattr(ids, "keys") else ids) <= config.data.max_prompt_length


def test_too_small_prompt_budget_fails_before_training(config, tokenizer):
    from omegaconf import OmegaConf, open_dict

    data = OmegaConf.create(OmegaConf.to_container(config.data))
    with open_dict(data):
        data.max_prompt_length = 16
    with pytest.raises(ValueError, match=r"data.max_prompt_length=16 is too small"):
        create_rl_dataset(data.train_files, data, tokenizer, None)


def _data_proto(tokenizer, items: list[dict], responses: list[str]) -> DataProto:
    """A rollout-shaped DataProto: prompts, right-padded responses, attention mask, non-tensor rows."""
    prompt_len, resp_len = 8, 64
    prompts = torch.full((len(items), prompt_len), tokenizer.pad_token_id)
    response_ids = torch.full((len(items), resp_len), tokenizer.pad_token_id)
    mask = torch.zeros((len(items), prompt_len + resp_len), dtype=torch.long)
    mask[:, :prompt_len] = 1
    for i, text in enumerate(responses):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:resp_len]
        response_ids[i, : len(ids)] = torch.tensor(ids)
        mask[i, prompt_len: prompt_len + len(ids)] = 1
    non_tensors = {key: np.array([item[key] for item in items], dtype=object)
                   for key in ("data_source", "reward_model", "extra_info")}
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": response_ids, "attention_mask": mask},
        non_tensors=non_tensors,
    )


def test_verl_reward_loop_scores_a_batch_with_our_compute_score(config, tokenizer):
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    items = [dataset[0], dataset[1], dataset[len(dataset) - 1], dataset[0]]
    first_move = dataset.mixture.build(dataset.refs[0]).legal_moves[0]
    sudoku = dataset.mixture.build(dataset.refs[-1])
    responses = [
        f"I will play {first_move}.<answer>{first_move}</answer>",   # legal move
        "<answer>z99</answer>",                                         # well formed, illegal
        f"<answer>{sudoku.ground_truth}</answer>",                      # solved puzzle
        "".join(f"<answer>{m}</answer>" for m in ["a1", "b1", "c1"]),   # listing moves
    ]
    worker = RewardLoopWorker(config)
    # verl binds its reward manager to the event loop current at construction; run on that loop
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(_data_proto(tokenizer, items, responses)))
    scores = [out["reward_score"] for out in outputs]
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] == pytest.approx(0.1)
    assert scores[2] == pytest.approx(1.0)
    assert scores[3] == 0.0
    for out in outputs:
        assert set(METRIC_KEYS) <= set(out["reward_extra_info"])
        assert out["reward_extra_info"]["failed"] == 0.0
        # the dataset's build time rides along in extra_info so run summaries can report our share of a step
        assert out["reward_extra_info"]["dataset_ms"] > 0.0
        assert out["reward_extra_info"]["reward_ms"] > 0.0
