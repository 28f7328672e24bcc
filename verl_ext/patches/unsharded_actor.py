"""verl's FSDP actor on one GPU without FSDP: the LoRA model as a plain module (``ACTOR_FSDP=off``).

On one GPU FSDP2 shards nothing, but verl 0.9.1's engine still wraps every decoder layer: each unit's forward and
backward copy its fp32 parameters into a bf16 buffer through a one-rank all-gather, free it again, and cast and
"reduce" the gradients. At the smoke load that per-unit work cost the 13k-token micro batch 0.09-0.20 s on an H100
against the same model without FSDP (docs/runs/2026-11-26-h100-compile/NOTES.md, section 0s). In verl on an H100 (section 0t) the plain actor's
smoke step was 1.23 / 1.25 s against 1.57 / 1.47 s with FSDP2 in two pairs (a tie in a third), and its weight sync
0.10-0.13 s against 0.24-0.29 s.

``install()`` wraps verl's ``FSDPEngine._build_fsdp_module``. For a training engine on a one-rank group with LoRA it
returns the module unwrapped, on the GPU, with the frozen base weights stored in verl's compute dtype
(``mixed_precision.param_dtype``, bf16) and the trainable adapter left in its own dtype (fp32 by default). verl's
forward runs under ``torch.autocast`` with that dtype (``_autocast_dtype``), so every op sees the numbers FSDP2's
mixed precision gives it: the base weights as FSDP2 casts them, the adapter cast to bf16 for its matmuls, and fp32
gradients accumulated on the fp32 adapter. The rest of verl's engine already has a branch for a plain module
(``fsdp_version(module) == 0``): plain gradient clipping, ``module.to`` for device moves, and checkpoints of plain
tensors (``merge-ppo`` reads them).

What it refuses, by name: more than one rank (each would train its own copy), a full fine-tune (FSDP2 keeps fp32
master weights and computes norms and embeddings in bf16; autocast cannot reproduce that), FSDP1, offloading,
fp16 compute (verl's loss scaler is FSDP's), QAT and activation offloading; under ``ACTOR_FSDP=auto`` (the train
scripts' default) such an engine keeps FSDP2 and the reason goes to the log. A forward-only engine (a separate
reference model) keeps verl's build. Loaded as ``verl_ext.patches.unsharded_actor`` through
``VERL_USE_EXTERNAL_MODULES``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
_PATCHED = "_verl_ext_unsharded_actor"
SWITCH = "ACTOR_FSDP=off"
# "auto" (the train scripts' default, resolved to off for a one-GPU LoRA actor): a refused setting keeps FSDP2 with
# the reason logged instead of stopping the run; unset: ACTOR_FSDP=off, where it raises
MODE_ENV = "VERL_EXT_ACTOR_FSDP"

logger = logging.getLogger(__name__)


def compute_dtype(engine_config: Any) -> torch.dtype:
    """verl's bf16/fp32 compute dtype, read as its ``_build_fsdp_module`` reads it (bf16 without a setting)."""
    from verl.utils.torch_dtypes import PrecisionType

    mixed_precision = getattr(engine_config, "mixed_precision", None)
    if mixed_precision is None:
        return torch.bfloat16
    return PrecisionType.to_dtype(mixed_precision.get("param_dtype", "bf16"))


def refusal(engine: Any, world_size: int) -> str | None:
    """Why this training engine must keep FSDP (None: it can run unsharded)."""
    config = engine.engine_config
    if world_size != 1:
        return (f"the actor runs on {world_size} ranks; without FSDP each would train its own copy of the model. "
                "Use it with one GPU (N_GPUS_PER_NODE=1, NNODES=1) or ACTOR_FSDP=on")
    if getattr(engine.model_config, "lora_rank", 0) <= 0:
        return ("a full fine-tune needs FSDP2's fp32 master weights with bf16 compute (norms and embeddings "
                "included), which autocast does not reproduce. Use ENABLE_LORA=1 or ACTOR_FSDP=on")
    if config.strategy != "fsdp2":
        return f"actor strategy is {config.strategy!r}; ACTOR_FSDP=off replaces FSDP2's build. Use FSDP_STRATEGY=fsdp2"
    for key in ("param_offload", "optimizer_offload", "offload_policy"):
        if getattr(config, key, False):
            return f"fsdp_config.{key}=True offloads through FSDP; without FSDP the actor stays on the GPU"
    dtype = compute_dtype(config)
    if dtype not in (torch.bfloat16, torch.float32):
        return f"mixed_precision.param_dtype is {dtype}; only bf16 and fp32 compute run without FSDP's loss scaler"
    if getattr(engine, "_qat_enabled", False):
        return "quantization-aware training (fsdp_config.qat) is only wired for FSDP"
    if getattr(engine.model_config, "enable_activation_offload", False):
        return "model.enable_activation_offload=True hooks into FSDP's units"
    return None


def unsharded(module: torch.nn.Module, dtype: torch.dtype, device: Any) -> torch.nn.Module:
    """``module`` on ``device`` with its frozen floating-point parameters in ``dtype`` (what FSDP2's mixed
    precision computes with); trainable parameters and buffers keep their dtype.

    With a lower-precision ``dtype`` (verl's forward then runs under autocast) PEFT's input cast is turned off:
    each LoRA layer would otherwise copy its ``dtype`` input to the adapter's fp32 only for autocast to copy it
    back for the adapter's matmul, twice more in the backward and again in each checkpointed recompute. The
    values are the same (the round trip is exact); the copies are not made.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    with torch.no_grad():
        for param in module.parameters():
            if not param.requires_grad and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
    if dtype != torch.float32:
        for layer in module.modules():
            if isinstance(layer, BaseTunerLayer):
                layer.cast_input_dtype_enabled = False
    return module.to(device)


def checkpoint_fsdp_version(local_path: str) -> int | None:
    """The FSDP version verl recorded beside a checkpoint (``fsdp_config.json``; 0: a plain module), if any."""
    path = Path(local_path) / "fsdp_config.json"
    if not path.is_file():
        return None
    version = json.loads(path.read_text()).get("FSDP_version")
    return version if isinstance(version, int) else None


def patch_engine(transformer_impl: ModuleType) -> None:
    """Make verl's FSDP engine build one-rank LoRA actors as plain modules, and refuse to resume them from a
    checkpoint saved with another FSDP version."""
    engine_class = transformer_impl.FSDPEngine
    if getattr(engine_class, _PATCHED, False):
        return
    verl_build = engine_class._build_fsdp_module
    verl_load = engine_class.load_checkpoint

    @functools.wraps(verl_build)
    def _build_fsdp_module(self: Any, module: torch.nn.Module) -> torch.nn.Module:
        if self.engine_config.forward_only:
            return verl_build(self, module)
        world_size = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        reason = refusal(self, world_size)
        if reason is not None and os.environ.get(MODE_ENV) == "auto":
            logger.warning("verl_ext.patches.unsharded_actor: ACTOR_FSDP=auto keeps FSDP2 for this actor: %s", reason)
            return verl_build(self, module)
        if reason is not None:
            raise ValueError(f"{SWITCH}: {reason}")
        dtype = compute_dtype(self.engine_config)
        self._autocast_dtype = dtype  # verl's forward_step runs under torch.autocast with it (none for fp32)
        self.scaler = None
        logger.warning("verl_ext.patches.unsharded_actor: the actor is a plain module on one GPU (no FSDP units); frozen "
                       "weights in %s, the adapter in its own dtype", dtype)
        return unsharded(module, dtype, transformer_impl.get_device_id())

    @functools.wraps(verl_load)
    def load_checkpoint(self: Any, local_path: str, *args: Any, **kwargs: Any) -> Any:
        saved = checkpoint_fsdp_version(local_path)
        current = transformer_impl.fsdp_version(self.module)
        if saved is not None and saved != current and 0 in (saved, current):
            raise ValueError(
                f"{local_path} was saved by an actor with FSDP version {saved} (0: ACTOR_FSDP=off) and this actor "
                f"has FSDP version {current}: the parameter layouts differ. Resume with the setting it was saved "
                "with, or start from the merged model (merge-ppo) instead of resuming")
        return verl_load(self, local_path, *args, **kwargs)

    engine_class._build_fsdp_module = _build_fsdp_module
    engine_class.load_checkpoint = load_checkpoint
    setattr(engine_class, _PATCHED, True)


def install() -> None:
    """Patch verl's FSDP engine now if imported, else as soon as it is."""
    after_import(ENGINE_MODULE, patch_engine)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
