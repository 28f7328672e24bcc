"""The pre-flight refuses a resident vLLM (ROLLOUT_FREE_CACHE=0) beside an actor that surely cannot fit in what
vLLM leaves of the GPU, names the numbers and the switch, and lets everything that may fit through."""

from __future__ import annotations

import pytest

from verl_ext.launch.memory import GIB, actor_lower_bound_bytes, check_resident_rollout, model_shape
from verl_ext.launch.preflight import compose

from test_train_scripts import dry_run, overrides_of

H100 = int(79.6 * GIB)


def h100() -> int:
    return H100


def qwen2_folder(tmp_path, name: str, **shape) -> str:
    from transformers import Qwen2Config

    folder = tmp_path / name
    Qwen2Config(**shape).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shapes")
    small = qwen2_folder(tmp, "half_b", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    seven = qwen2_folder(tmp, "seven_b", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                         num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False)
    return small, seven


def config(model: str, **env: str):
    return compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="full", MODEL_PATH=model,
                                                       **env)))


def test_model_shape_counts_parameters_without_weights(shapes):
    small, seven = shapes
    params, hidden, layers = model_shape(small)
    assert 0.49e9 < params < 0.50e9 and (hidden, layers) == (896, 24)  # Qwen2.5-0.5B: 494M
    params, hidden, layers = model_shape(seven)
    assert 7.6e9 < params < 7.7e9 and (hidden, layers) == (3584, 28)  # Qwen2.5-7B: 7.62B
    assert model_shape("Qwen/Qwen2.5-0.5B-Instruct") is None  # a hub id: not looked up


def test_lower_bound_counts_sharded_weights_states_and_checkpoints():
    lora = actor_lower_bound_bytes(1_000, 10, 2, dtype_bytes=4, full_finetune=False, world_size=2, tokens=100)
    assert lora == 1_000 * 4 // 2 + 100 * 10 * 2 * 2
    full = actor_lower_bound_bytes(1_000, 10, 2, dtype_bytes=4, full_finetune=True, world_size=2, tokens=100)
    assert full == 1_000 * 4 * 4 // 2 + 100 * 10 * 2 * 2


def test_the_measured_half_b_lora_run_passes_and_a_seven_b_one_is_refused(shapes):
    small, seven = shapes
    assert check_resident_rollout(config(small), h100) == []  # ran on the H100: 8.7 GB actor beside 0.6 x 80 GB
    problems = check_resident_rollout(config(seven), h100)
    assert len(problems) == 1 and problems[0].startswith(
        "ROLLOUT_FREE_CACHE=0 (actor_rollout_ref.rollout.free_cache_engine=False) keeps vLLM resident with "
        "GPU_MEMORY_UTILIZATION=0.6 of each 79.6 GiB GPU, leaving 31.8 GiB for the actor's update; the actor needs "
        "at least 40.6 GiB there (7.62B parameters in fp32, LoRA: the frozen weights, sharded over 1 GPU(s)")
    assert "Set ROLLOUT_FREE_CACHE=1" in problems[0]
    # each way out passes: vLLM sleeps, a smaller share, more GPUs to shard over
    assert check_resident_rollout(config(seven, ROLLOUT_FREE_CACHE="1"), h100) == []
    assert check_resident_rollout(config(seven, GPU_MEMORY_UTILIZATION="0.3"), h100) == []
    assert check_resident_rollout(config(seven, N_GPUS_PER_NODE="8"), h100) == []
    # SGLang keeps verl's sleep by default; a CPU machine (no GPU memory known) checks nothing
    assert check_resident_rollout(config(seven, ROLLOUT_BACKEND="sglang"), h100) == []
    assert check_resident_rollout(config(seven), lambda: None) == []

    def never() -> int:
        raise AssertionError("the GPU is queried only when vLLM stays resident")

    assert check_resident_rollout(config(seven, ROLLOUT_FREE_CACHE="1"), never) == []


def test_a_full_finetune_counts_gradients_and_optimizer_states(shapes):
    small, _ = shapes
    problems = check_resident_rollout(config(small, ENABLE_LORA="0", GPU_MEMORY_UTILIZATION="0.9"), h100)
    assert len(problems) == 1 and "full fine-tune: weights, gradients and Adam states" in problems[0]
