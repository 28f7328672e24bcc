"""Pre-flight: does the actor's update fit beside a resident vLLM (``ROLLOUT_FREE_CACHE=0``)?

With ``actor_rollout_ref.rollout.free_cache_engine=False`` vLLM keeps its ``gpu_memory_utilization`` share of every
GPU while the FSDP actor trains on the same GPUs, so the update has only the rest. When it does not fit, verl stops
with CUDA out of memory in step 1's update, minutes after the command. This check refuses only what surely cannot
fit: a **lower bound** of the actor's memory per GPU (its sharded weights, plus gradients and two Adam states for a
full fine-tune, plus one bf16 hidden state per layer and token of a micro batch, which activation checkpointing
keeps) against the GPU memory left beside vLLM. The real peak is higher (the recomputed layer, logits, allocator
slack: 8.7 GB measured against a 4.2 GB bound for the 0.5B LoRA actor at 64k tokens on the H100), so passing
this check is no promise; failing it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

GIB = 1024**3
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def gpu_memory_bytes() -> int | None:
    """The smallest GPU's total memory on this node through NVML (no CUDA context in this process), or None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            totals = [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total for i in range(count)]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (no driver, no GPU: nothing to compare against)
        return None
    return min(totals) if totals else None


def model_shape(path: str) -> tuple[int, int, int] | None:
    """(parameters, hidden size, layers) of a local Hugging Face model folder, counted on the meta device without
    loading weights; None for hub ids, folders without config.json, or architectures transformers cannot build."""
    local = Path(os.path.expanduser(path))
    if not (local / "config.json").is_file():
        return None
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(local, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001  (a custom architecture: leave it to the run)
        return None
    text = config.get_text_config()  # the language model's own config (itself for text-only models)
    hidden = getattr(text, "hidden_size", None)
    layers = getattr(text, "num_hidden_layers", None)
    if not hidden or not layers:
        return None
    return params, int(hidden), int(layers)


def actor_lower_bound_bytes(params: int, hidden: int, layers: int, *, dtype_bytes: int, full_finetune: bool,
                            world_size: int, tokens: int) -> int:
    """Bytes per GPU the actor needs at least during its update (see the module docstring)."""
    states = 4 if full_finetune else 1  # weights (+ gradients and Adam's two moments when every weight trains)
    weights = params * dtype_bytes * states // max(world_size, 1)
    checkpoints = tokens * hidden * layers * 2  # one bf16 hidden state per layer and token of the micro batch
    return weights + checkpoints


def check_resident_rollout(cfg: Any, gpu_total_bytes: Callable[[], int | None] = gpu_memory_bytes) -> list[str]:
    """A problem when vLLM stays resident and the actor's lower bound exceeds what it leaves on each GPU.
    ``gpu_total_bytes`` is asked only when the config keeps vLLM resident (None: no GPU known, nothing checked)."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "vllm" or rollout.get("free_cache_engine", True):
        return []
    total = gpu_total_bytes()
    shape = model_shape(str(cfg.actor_rollout_ref.model.path)) if total is not None else None
    if shape is None:
        return []
    params, hidden, layers = shape
    actor = cfg.actor_rollout_ref.actor
    dtype = str(actor.fsdp_config.get("model_dtype") or "fp32")
    seq_len = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    tokens = int(actor.ppo_max_token_len_per_gpu) if actor.use_dynamic_bsz else \
        int(actor.ppo_micro_batch_size_per_gpu or 1) * seq_len
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    full = int(cfg.actor_rollout_ref.model.get("lora_rank") or 0) == 0
    need = actor_lower_bound_bytes(params, hidden, layers, dtype_bytes=DTYPE_BYTES.get(dtype, 4),
                                   full_finetune=full, world_size=world, tokens=tokens)
    share = float(rollout.gpu_memory_utilization)
    left = int(total * (1 - share))
    if need <= left:
        return []
    what = "full fine-tune: weights, gradients and Adam states" if full else "LoRA: the frozen weights"
    return [f"ROLLOUT_FREE_CACHE=0 (actor_rollout_ref.rollout.free_cache_engine=False) keeps vLLM resident with "
            f"GPU_MEMORY_UTILIZATION={share} of each {total / GIB:.1f} GiB GPU, leaving "
            f"{left / GIB:.1f} GiB for the actor's update; the actor needs at least {need / GIB:.1f} GiB there "
            f"({params / 1e9:.2f}B parameters in {dtype}, {what}, sharded over {world} GPU(s), plus checkpointed "
            f"activations of {tokens} tokens x {hidden} x {layers} layers). Set ROLLOUT_FREE_CACHE=1 (vLLM sleeps "
            f"while the actor trains), or lower GPU_MEMORY_UTILIZATION or MAX_TOKEN_LEN_PER_GPU"]
