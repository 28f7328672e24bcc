"""Text generation for evaluation: vLLM when installed (batched, GPU), transformers otherwise.

Both backends build the prompt the way training does: ``tokenizer.apply_chat_template(messages,
add_generation_prompt=True)`` on the task's chat messages, and decode the new tokens with
``skip_special_tokens=True``. Remote code is never trusted unless asked for.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..envs.config import ConfigError

logger = logging.getLogger(__name__)
BACKENDS = ("auto", "transformers", "vllm")
DTYPES = ("auto", "float32", "bfloat16", "float16")
SCORING_DTYPES = DTYPES[1:]  # teacher-forced scoring names its dtype (the exploitability suite: float32)
Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings shared by both backends. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    batch_size: int = 16
    device: str = "auto"
    dtype: str = "auto"
    vllm_gpu_memory_utilization: float = 0.85
    # a fixed KV cache: vLLM then skips its start-up memory profile, which fails when another process on the same
    # GPU frees memory meanwhile (an eval beside a training run)
    vllm_kv_cache_memory_bytes: int | None = None
    vllm_max_model_len: int | None = None
    vllm_tensor_parallel_size: int = 1
    vllm_max_lora_rank: int = 64

    def validate(self) -> None:
        if self.max_new_tokens <= 0:
            raise ConfigError(f"--max-new-tokens: must be > 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"--temperature: must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"--top-p: must be in (0, 1], got {self.top_p}")
        if self.batch_size <= 0:
            raise ConfigError(f"--batch-size: must be > 0, got {self.batch_size}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype: unknown {self.dtype!r} (choose from {', '.join(DTYPES)})")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ConfigError(f"--vllm-gpu-memory-utilization: must be in (0, 1], got "
                              f"{self.vllm_gpu_memory_utilization}")
        if self.vllm_kv_cache_memory_bytes is not None and self.vllm_kv_cache_memory_bytes <= 0:
            raise ConfigError(f"--vllm-kv-cache-memory-bytes: must be > 0, got {self.vllm_kv_cache_memory_bytes}")


class Backend(Protocol):
    """Generates one reply per chat; ``seeds`` (one per chat) make sampled decoding reproducible."""

    name: str

    def generate(self, chats: Sequence[Messages], seeds: Sequence[int],
                 max_new_tokens: int | None = None) -> list[str]: ...

    def close(self) -> None: ...


def generated_length(row: Sequence[int], stop_ids: set[int]) -> int:
    """Tokens a reply generated, its stop token included (verl's response length); padding after it is not."""
    for position, token in enumerate(row):
        if token in stop_ids:
            return position + 1
    return len(row)


def prompt_ids(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of the chat prompt, as verl builds them for training rollouts (without the generation prompt: the
    conversation as it stands)."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt, tokenize=True,
                                        return_dict=False)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def load_tokenizer(path: str, trust_remote_code: bool) -> Any:
    """The model's tokenizer; it must have a chat template (prompts are chats, as in training)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"--models: the tokenizer in {path!r} has no chat template; evaluation prompts are "
                          "chat messages as in training (use an instruct model or add a template)")
    return tokenizer


def check_model_dir(path: str, flag: str) -> None:
    """A clear error before any heavy import when a model/adapter folder does not exist."""
    if not Path(path).is_dir():
        raise ConfigError(f"{flag}: no such model folder {path!r}")


# --------------------------------------------------------------------------- transformers
@contextmanager
def full_float32_matmuls() -> Iterator[None]:
    """float32 matmuls in full precision (no TF32) inside, the previous settings restored after: another library
    of the process (vLLM, a trainer) may have allowed TF32, which would make float32 scores depend on it."""
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def resolve_dtype(dtype: str, device_type: str) -> str:
    """The torch dtype name ``--dtype`` means on ``device_type`` (``auto``: bfloat16 on CUDA, float32 elsewhere)."""
    if dtype == "auto":
        return "bfloat16" if device_type == "cuda" else "float32"
    return dtype


def sampling_kwargs(settings: GenerationSettings) -> dict[str, Any]:
    """``generate`` keywords for sampled decoding as verl 0.9.1's rollout samples (rollout.yaml: temperature,
    top_p, ``top_k: -1``, and ``repetition_penalty=1.0`` in every request): explicit, so that neither
    transformers' own defaults (``top_k=50``) nor the model's ``generation_config.json`` (a top_k, min_p,
    repetition penalty, ...) change the distribution the eval samples from. ``temperature == 0``: greedy, as
    verl's validation (``val_kwargs``), with no penalty either."""
    neutral = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0}
    if settings.temperature <= 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, **neutral}
    return {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p, "top_k": 0,
            "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, **neutral}


class TransformersBackend:
    """Batched ``model.generate`` with left padding (CPU or one GPU); LoRA adapters through PEFT."""

    name = "transformers"

    def __init__(self, path: str, adapter: str | None, settings: GenerationSettings,
                 trust_remote_code: bool = False) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.settings = settings
        device = settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.device = torch.device(device)
        except RuntimeError as err:
            raise ConfigError(f"--device: invalid device {settings.device!r}: {err}") from None
        self.dtype = resolve_dtype(settings.dtype, self.device.type)
        dtype = self.dtype
        self.tokenizer = load_tokenizer(path, trust_remote_code)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                     trust_remote_code=trust_remote_code)
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter)
        self.model = model.to(self.device).eval()
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_token_id = eos
        self.last_token_counts: list[int] = []

    def generate(self, chats: Sequence[Messages], seeds: Sequence[int],
                 max_new_tokens: int | None = None) -> list[str]:
        """One reply per chat of up to ``max_new_tokens`` (default: the settings') tokens."""
        import torch

        encoded = [prompt_ids(self.tokenizer, chat) for chat in chats]
        # Similar lengths in a batch waste less padding; the order is fixed, so results stay deterministic.
        order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))
        replies: list[str] = [""] * len(encoded)
        counts = [0] * len(encoded)
        eos = self.eos_token_id
        stop_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        size = self.settings.batch_size
        for start in range(0, len(order), size):
            batch = order[start:start + size]
            padded = self.tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, padding=True,
                                        return_tensors="pt")
            kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens or self.settings.max_new_tokens,
                                      "pad_token_id": self.tokenizer.pad_token_id,
                                      "eos_token_id": self.eos_token_id}
            kwargs.update(sampling_kwargs(self.settings))
            if self.settings.temperature > 0:
                torch.manual_seed(seeds[batch[0]])
            with torch.no_grad():
                out = self.model.generate(input_ids=padded["input_ids"].to(self.device),
                                          attention_mask=padded["attention_mask"].to(self.device), **kwargs)
            new_tokens = out[:, padded["input_ids"].shape[1]:]
            for row, i in zip(new_tokens.tolist(), batch):
                replies[i] = self.tokenizer.decode(row, skip_special_tokens=True)
                counts[i] = generated_length(row, stop_ids)
        self.last_token_counts = counts  # tokens each reply of this call generated (verl-ext signal reads them)
        return replies

    def continuation_logprobs(self, chats: Sequence[Messages], continuations: Sequence[str]) -> list[float]:
        """Summed log-probability of ``continuations[i]`` as the reply to ``chats[i]``, teacher-forced: the reply's
        tokens (``tokenizer.encode`` without special tokens, as a response is tokenized alone) after the chat
        template's generation prompt, under the model's raw logits (temperature 1) in the backend's dtype (float32
        matmuls without TF32). Batched by length (``batch_size`` rows per forward), left-padded with explicit
        position ids; only the logits that predict reply tokens are computed (``logits_to_keep``)."""
        import torch

        if len(chats) != len(continuations):
            raise ValueError(f"{len(chats)} chats but {len(continuations)} continuations")
        prompts: dict[tuple[tuple[str, str], ...], list[int]] = {}
        rows: list[tuple[list[int], list[int]]] = []
        for chat, text in zip(chats, continuations):
            key = tuple((m["role"], m["content"]) for m in chat)
            if key not in prompts:
                prompts[key] = prompt_ids(self.tokenizer, chat)
            answer = [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]
            if not answer:
                raise ValueError(f"continuation {text!r} has no tokens")
            rows.append((prompts[key], answer))
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i][0]) + len(rows[i][1]), i))
        pad = self.tokenizer.pad_token_id
        scores = [0.0] * len(rows)
        for start in range(0, len(order), self.settings.batch_size):
            batch = order[start:start + self.settings.batch_size]
            seqs = [rows[i][0] + rows[i][1] for i in batch]
            width = max(len(seq) for seq in seqs)
            keep = max(len(rows[i][1]) for i in batch) + 1
            ids = torch.tensor([[pad] * (width - len(seq)) + seq for seq in seqs], device=self.device)
            mask = torch.tensor([[0] * (width - len(seq)) + [1] * len(seq) for seq in seqs], device=self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad(), full_float32_matmuls():
                try:
                    logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                        logits_to_keep=keep, use_cache=False).logits
                except TypeError:  # a model without logits_to_keep: all positions, then the tail
                    logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                        use_cache=False).logits
                logprobs = logits[:, -keep:].float().log_softmax(-1)
            for row, i in enumerate(batch):
                answer = rows[i][1]
                # logits[-keep + j'] predicts position width - keep + j' + 1; answer token j sits at width - k + j
                first = keep - len(answer) - 1
                targets = torch.tensor(answer, device=self.device)
                picked = logprobs[row, first:first + len(answer)].gather(-1, targets[:, None])
                scores[i] = float(picked.sum())
        return scores

    def close(self) -> None:
        import torch

        del self.model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------- vLLM (GPU only; untested on CPU CI)
def vllm_engine_kwargs(path: str, adapter: str | None, settings: GenerationSettings,
                       trust_remote_code: bool = False) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for ``settings``."""
    kwargs: dict[str, Any] = {"model": path, "trust_remote_code": trust_remote_code,
                              "gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
                              "tensor_parallel_size": settings.vllm_tensor_parallel_size,
                              "enable_lora": adapter is not None}
    if settings.dtype != "auto":
        kwargs["dtype"] = settings.dtype
    if settings.vllm_max_model_len:
        kwargs["max_model_len"] = settings.vllm_max_model_len
    if settings.vllm_kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = settings.vllm_kv_cache_memory_bytes
    if adapter is not None:
        kwargs["max_lora_rank"] = settings.vllm_max_lora_rank
    return kwargs


class VLLMBackend:
    """``vllm.LLM`` with one ``SamplingParams`` per prompt (seeded) and an optional LoRA adapter."""

    name = "vllm"

    def __init__(self, path: str, adapter: str | None, settings: GenerationSettings,
                 trust_remote_code: bool = False) -> None:
        # The eval process has already touched CUDA (device checks, the transformers backend of another
        # model), and vLLM's engine core forks by default: measured on the H100, that fails with "Cannot
        # re-initialize CUDA in forked subprocess". Spawned workers start clean.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        from vllm import LLM

        self.settings = settings
        self.tokenizer = load_tokenizer(path, trust_remote_code)
        self.llm = LLM(**vllm_engine_kwargs(path, adapter, settings, trust_remote_code))
        self.lora_request = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("eval_adapter", 1, str(Path(adapter).resolve()))
        self.last_token_counts: list[int] = []

    def max_model_len(self) -> int | None:
        """The engine's context length (prompt + reply), None when the engine does not say."""
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        value = getattr(config, "max_model_len", None)
        return int(value) if value else None

    def generate(self, chats: Sequence[Messages], seeds: Sequence[int],
                 max_new_tokens: int | None = None) -> list[str]:
        """Replies of up to ``max_new_tokens`` (default: the settings'), cut to what the context length leaves after the prompt. A prompt
        that leaves no room (a long game conversation, ``--game-context game``) gets an empty reply, which the game
        loop rejects like any unparseable one, instead of vLLM's error ending the whole eval; the training agent
        loop likewise stops a game whose tokens outgrow its budget (a truncated game pays 0 by default)."""
        from vllm import SamplingParams

        greedy = self.settings.temperature <= 0
        limit = self.max_model_len()
        ids = [prompt_ids(self.tokenizer, chat) for chat in chats]
        cap = max_new_tokens or self.settings.max_new_tokens
        room = [cap if limit is None else min(cap, limit - len(i)) for i in ids]
        keep = [k for k, r in enumerate(room) if r > 0]
        if len(keep) < len(ids):
            logger.warning("vLLM: %d of %d prompts leave no room for a reply in the %s-token context; they get an "
                           "empty reply", len(ids) - len(keep), len(ids), limit)
        params = [SamplingParams(max_tokens=room[k],
                                 temperature=0.0 if greedy else self.settings.temperature,
                                 top_p=1.0 if greedy else self.settings.top_p, seed=int(seeds[k]),
                                 top_k=-1, min_p=0.0, repetition_penalty=1.0,  # verl's rollout: no top-k, no penalty
                                 skip_special_tokens=True)
                  for k in keep]
        outputs = self.llm.generate([{"prompt_token_ids": ids[k]} for k in keep], params,
                                    lora_request=self.lora_request, use_tqdm=False) if keep else []
        replies, counts = [""] * len(ids), [0] * len(ids)
        for k, out in zip(keep, outputs):
            counts[k] = len(out.outputs[0].token_ids) if out.outputs else 0
            replies[k] = out.outputs[0].text if out.outputs else ""
        self.last_token_counts = counts
        return replies

    def close(self) -> None:
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del self.llm
        gc.collect()
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:  # pragma: no cover - best effort only
            pass


def vllm_available() -> bool:
    """vLLM is importable and a CUDA GPU is visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def make_backend(kind: str, path: str, adapter: str | None, settings: GenerationSettings,
                 trust_remote_code: bool = False) -> Backend:
    """Build the backend ``kind`` (``auto`` picks vLLM when it is installed and a GPU is visible)."""
    if kind not in BACKENDS:
        raise ConfigError(f"--backend: unknown {kind!r} (choose from {', '.join(BACKENDS)})")
    if kind == "auto":
        kind = "vllm" if vllm_available() else "transformers"
    if kind == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("--backend vllm: vllm is not installed (pip install 'verl-ext[vllm]')")
        logger.info("generating with vLLM")
        return VLLMBackend(path, adapter, settings, trust_remote_code)
    return TransformersBackend(path, adapter, settings, trust_remote_code)
