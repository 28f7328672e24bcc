"""`verl-ext eval` samples as verl's rollout does: no top-k (transformers' default is 50), no repetition penalty,
whatever the model's generation_config.json says; the vLLM backend's parameters match verl 0.9.1's rollout config."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from verl_ext.envs.config import ConfigError
from verl_ext.evaluation.backends import GenerationSettings, TransformersBackend, VLLMBackend, sampling_kwargs
from verl_ext.tiny_model import build_qwen2


@pytest.fixture(scope="module")
def opinionated_model(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 whose generation_config.json asks for top_k 20, top_p 0.5 and a repetition penalty."""
    model_dir = build_qwen2(tmp_path_factory.mktemp("opinionated") / "model", "tiny", tokenizer_dir, dtype="float32")
    config_path = model_dir / "generation_config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    config.update(top_k=20, top_p=0.5, repetition_penalty=1.3, do_sample=True)
    config_path.write_text(json.dumps(config))
    return model_dir


def scores_and_logits(model_dir: Path, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``generate`` sampled from (processed scores) and the model's raw logits, 4 steps of one prompt."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.manual_seed(0)
    out = model.generate(input_ids=torch.tensor([[5, 6, 7, 5, 6, 7]]), max_new_tokens=4,
                         output_scores=True, output_logits=True, return_dict_in_generate=True,
                         pad_token_id=0, **kwargs)
    return torch.stack(out.scores), torch.stack(out.logits)


def test_sampling_uses_the_whole_distribution_like_verls_rollout(opinionated_model):
    scores, logits = scores_and_logits(opinionated_model, **sampling_kwargs(GenerationSettings(temperature=1.0)))
    assert logits.shape[-1] > 50 and torch.isfinite(scores).all()  # no token cut away by top-k or top-p
    assert torch.allclose(scores, logits)  # and no repetition penalty
    hot, raw = scores_and_logits(opinionated_model, **sampling_kwargs(GenerationSettings(temperature=0.5)))
    assert torch.allclose(hot, raw / 0.5)
    # the old call: transformers' and the model's defaults (top_k, top_p 0.5, penalty) cut the distribution
    old, _ = scores_and_logits(opinionated_model, do_sample=True, temperature=1.0, top_p=1.0)
    assert not torch.isfinite(old).all()


def test_greedy_takes_the_argmax_without_a_penalty(opinionated_model):
    scores, logits = scores_and_logits(opinionated_model, **sampling_kwargs(GenerationSettings(temperature=0.0)))
    assert torch.allclose(scores, logits)


def test_transformers_backend_passes_the_settings(opinionated_model, monkeypatch):
    backend = TransformersBackend(str(opinionated_model), None, GenerationSettings(max_new_tokens=3, temperature=1.0))
    seen: list[dict] = []
    original = backend.model.generate

    def spy(**kwargs):
        seen.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(backend.model, "generate", spy)
    backend.generate([[{"role": "user", "content": "a"}]], [3])
    assert seen[0]["top_k"] == 0 and seen[0]["top_p"] == 1.0 and seen[0]["repetition_penalty"] == 1.0
    assert seen[0]["do_sample"] is True and seen[0]["temperature"] == 1.0
    backend.close()


def vllm_backend_without_engine(monkeypatch, settings: GenerationSettings, chat_template
                                ) -> tuple[VLLMBackend, list[dict]]:
    """A VLLMBackend with ``settings`` and a tokenizer whose ``apply_chat_template`` is ``chat_template``, built
    without vLLM (its ``llm`` is for the test to set), and the list that every SamplingParams it makes is added to."""
    made: list[dict] = []
    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kwargs: made.append(kwargs) or kwargs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    backend = object.__new__(VLLMBackend)
    backend.settings = settings
    backend.lora_request = None
    backend.tokenizer = types.SimpleNamespace(apply_chat_template=chat_template)
    return backend, made


def test_vllm_parameters_match_verls_rollout_defaults(monkeypatch):
    from omegaconf import OmegaConf

    from verl_ext.launch.preflight import compose

    backend, made = vllm_backend_without_engine(monkeypatch, GenerationSettings(temperature=1.0),
                                                lambda *a, **k: [1, 2])
    backend.llm = types.SimpleNamespace(generate=lambda prompts, params, **k: [
        types.SimpleNamespace(outputs=[types.SimpleNamespace(text="x", token_ids=[3])]) for _ in prompts])
    backend.generate([[{"role": "user", "content": "a"}]], [1])
    rollout = OmegaConf.select(compose("ppo_trainer", []), "actor_rollout_ref.rollout")
    assert made[0]["top_k"] == rollout.top_k == -1 and made[0]["top_p"] == rollout.top_p == 1.0
    assert made[0]["temperature"] == rollout.temperature == 1.0 and made[0]["repetition_penalty"] == 1.0
    assert made[0]["min_p"] == 0.0


def test_vllm_replies_fit_the_context_and_a_prompt_without_room_gets_an_empty_reply(monkeypatch):
    """A whole game conversation (--game-context game, Hanabi's up to 16 turns a seat) can outgrow the model's
    context: vLLM would refuse the prompt and end the eval. Replies are cut to the room left, and a prompt with no
    room gets an empty reply (rejected by the game loop) without reaching vLLM."""
    backend, made = vllm_backend_without_engine(  # a prompt's content is its length in tokens
        monkeypatch, GenerationSettings(max_new_tokens=256), lambda messages, **k: [1] * int(messages[0]["content"]))
    sent: list[list[int]] = []

    def generate(prompts, params, **kwargs):
        sent.extend(p["prompt_token_ids"] for p in prompts)
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"r{len(p['prompt_token_ids'])}",
                                                                     token_ids=[3, 4])]) for p in prompts]

    backend.llm = types.SimpleNamespace(generate=generate,
                                        llm_engine=types.SimpleNamespace(model_config=types.SimpleNamespace(
                                            max_model_len=8192)))
    chats = [[{"role": "user", "content": str(n)}] for n in (100, 8000, 8192, 9000)]
    assert backend.generate(chats, [1, 2, 3, 4]) == ["r100", "r8000", "", ""]
    assert [len(p) for p in sent] == [100, 8000] and [m["max_tokens"] for m in made] == [256, 192]
    assert [m["seed"] for m in made] == [1, 2] and backend.last_token_counts == [2, 2, 0, 0]
    made.clear()
    assert backend.generate([[{"role": "user", "content": "9000"}]], [5]) == [""] and not made
    backend.llm = types.SimpleNamespace(generate=generate)  # an engine that does not say: the full budget
    backend.generate([[{"role": "user", "content": "9000"}]], [5])
    assert made[0]["max_tokens"] == 256


def test_vllm_engine_can_take_a_fixed_kv_cache():
    """--vllm-kv-cache-memory-bytes reaches vllm.LLM as kv_cache_memory_bytes (vLLM then skips the start-up memory
    profile that fails beside another process on the GPU); unset, vLLM sizes the cache itself; <= 0 is refused."""
    from verl_ext.evaluation.backends import vllm_engine_kwargs
    from verl_ext.evaluation.cli import parse_args

    default = vllm_engine_kwargs("m", None, GenerationSettings(vllm_gpu_memory_utilization=0.3))
    assert "kv_cache_memory_bytes" not in default and default["gpu_memory_utilization"] == 0.3
    fixed = GenerationSettings(vllm_kv_cache_memory_bytes=4 << 30)
    assert vllm_engine_kwargs("m", None, fixed)["kv_cache_memory_bytes"] == 4 << 30
    args, _ = parse_args(["--models", "a=scripted:random", "--vllm-kv-cache-memory-bytes", "4294967296"])
    assert args.vllm_kv_cache_memory_bytes == 4294967296
    with pytest.raises(ConfigError, match="--vllm-kv-cache-memory-bytes: must be > 0, got 0"):
        GenerationSettings(vllm_kv_cache_memory_bytes=0).validate()
