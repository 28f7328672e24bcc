"""LoRA checkpoints: turn verl's PEFT-wrapped shard keys into a PEFT adapter, and merge adapters with PEFT.

verl wraps the actor with `peft.get_peft_model(model, LoraConfig(task_type=CAUSAL_LM, r, lora_alpha,
target_modules, bias="none"))` before FSDP, so shard keys are the `PeftModel.state_dict()` names:

    base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight    # frozen base weight
    base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
    base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight
    base_model.model.model.embed_tokens.weight                            # untargeted modules

(`checkpoint.save_lora_only=True` keeps only the `lora_` keys.) The adapter file and config are produced by
PEFT itself (`get_peft_model_state_dict`, `LoraConfig.save_pretrained`) and merging uses `merge_and_unload`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file
from transformers import PretrainedConfig, PreTrainedModel

from .architecture import build_meta_model
from .errors import MergeError
from .layout import LoraTrainMeta

if TYPE_CHECKING:  # peft is imported where used: full fine-tune merges do not need it
    from peft import LoraConfig, PeftModel

PEFT_PREFIX = "base_model.model."
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
ADAPTER_CONFIG_NAME = "adapter_config.json"
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.(?P<adapter>[^.]+)\.weight$")


def is_adapter_key(name: str) -> bool:
    """Same predicate verl uses for LoRA-only checkpoints (`BaseCheckpointManager.is_lora_only_state_dict`)."""
    return "lora_" in name or ".adapter_" in name


def base_model_key(name: str) -> str:
    """`base_model.model.X.base_layer.weight` -> `X.weight` (the plain transformers name)."""
    if not name.startswith(PEFT_PREFIX):
        raise MergeError(f"LoRA checkpoint key {name!r} lacks the PEFT prefix {PEFT_PREFIX!r}")
    return name[len(PEFT_PREFIX) :].replace(".base_layer.", ".")


@dataclass(frozen=True)
class AdapterShapes:
    """What the adapter tensors of a checkpoint say about the LoRA config."""

    rank: int
    target_modules: tuple[str, ...]


def inspect_adapter_tensors(shapes: dict[str, tuple[int, ...]]) -> AdapterShapes:
    """Infer rank and target module names from `...<module>.lora_A.default.weight` keys and shapes."""
    ranks: dict[int, str] = {}
    modules: set[str] = set()
    adapters: set[str] = set()
    for name, shape in shapes.items():
        match = _LORA_KEY.match(name)
        if not match:
            raise MergeError(
                f"unsupported adapter tensor {name!r}: merge-ppo handles plain LoRA (lora_A/lora_B weights); "
                "DoRA, LoRA biases and embedding adapters are not supported"
            )
        adapters.add(match.group("adapter"))
        modules.add(match.group("module").rsplit(".", 1)[-1])
        rank = shape[0] if match.group("which") == "A" else shape[-1]
        ranks.setdefault(rank, name)
    if len(adapters) != 1:
        raise MergeError(f"expected one adapter name in the checkpoint, found {sorted(adapters)}")
    if len(ranks) != 1:
        examples = ", ".join(f"r={r} ({n})" for r, n in sorted(ranks.items())[:3])
        raise MergeError(f"LoRA tensors disagree on the rank: {examples}")
    return AdapterShapes(rank=next(iter(ranks)), target_modules=tuple(sorted(modules)))


def make_lora_config(
    adapter: AdapterShapes,
    meta: LoraTrainMeta | None,
    alpha_override: float | None,
    base_model_name_or_path: str | None,
    meta_path: Path,
) -> LoraConfig:
    """The LoraConfig verl trained with: rank from the tensors, alpha from `lora_train_meta.json` (or override)."""
    from peft import LoraConfig

    if meta is not None and meta.rank != adapter.rank:
        raise MergeError(f"{meta_path} says r={meta.rank} but the lora_A/lora_B tensors have rank {adapter.rank}")
    alpha = alpha_override if alpha_override is not None else (meta.alpha if meta else None)
    if alpha is None:
        raise MergeError(
            f"LoRA alpha unknown: {meta_path} is missing or has no 'lora_alpha'; pass --lora-alpha "
            "(actor_rollout_ref.model.lora_alpha of the run)"
        )
    return LoraConfig(
        task_type=meta.task_type if meta else "CAUSAL_LM",
        r=adapter.rank,
        lora_alpha=alpha,
        target_modules=list(adapter.target_modules),
        bias="none",
        base_model_name_or_path=base_model_name_or_path,
        inference_mode=True,
    )


def wrap_with_lora(model: PreTrainedModel, lora_config: LoraConfig) -> PeftModel:
    """`get_peft_model` with a private copy of `lora_config` (PEFT mutates it) that keeps its base model name."""
    from peft import get_peft_model

    lora_config = copy.deepcopy(lora_config)
    requested_base = lora_config.base_model_name_or_path
    # get_peft_model records (and warns about) the model's own path as the base; set the requested one after.
    lora_config.base_model_name_or_path = None
    peft_model = get_peft_model(model, lora_config)
    peft_model.peft_config["default"].base_model_name_or_path = requested_base
    return peft_model


def build_meta_peft_model(config: PretrainedConfig, lora_config: LoraConfig, trust_remote_code: bool) -> PeftModel:
    """The PeftModel verl trained, on the meta device (for key checks and adapter export)."""
    return wrap_with_lora(build_meta_model(config, trust_remote_code), lora_config)


def write_adapter(out_dir: Path, meta_peft_model: PeftModel, lora_tensors: dict[str, torch.Tensor]) -> None:
    """Save `adapter_config.json` + `adapter_model.safetensors` exactly as `PeftModel.save_pretrained` names them."""
    from peft.utils import get_peft_model_state_dict

    out_dir.mkdir(parents=True, exist_ok=True)
    adapter_state = get_peft_model_state_dict(meta_peft_model, state_dict=lora_tensors)
    if len(adapter_state) != len(lora_tensors):
        raise MergeError(f"PEFT kept {len(adapter_state)} of {len(lora_tensors)} adapter tensors; layout unknown")
    tensors = {name: tensor.contiguous() for name, tensor in adapter_state.items()}
    save_file(tensors, str(out_dir / ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"})
    meta_peft_model.peft_config["default"].save_pretrained(str(out_dir))


def attach_adapter(base_model: PreTrainedModel, adapter_dir: Path | str) -> PeftModel:
    """Load a PEFT adapter dir onto `base_model` (as `PeftModel.from_pretrained`), with readable errors."""
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=False)
    except (ValueError, KeyError, RuntimeError, OSError) as exc:
        raise MergeError(f"cannot load the adapter in {adapter_dir} onto the base model: {exc}") from exc


def merge_and_unload(peft_model: PeftModel) -> PreTrainedModel:
    """PEFT's merge, with `safe_merge` so NaN/inf in the merged weights raise instead of being saved."""
    try:
        return peft_model.merge_and_unload(safe_merge=True)
    except ValueError as exc:
        raise MergeError(f"PEFT refused to merge the adapter: {exc}") from exc
