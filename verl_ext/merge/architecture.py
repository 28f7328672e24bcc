"""What the output model must contain: built from the checkpoint's HF config on the meta device (no memory)."""

from __future__ import annotations

from pathlib import Path

import torch
from accelerate import init_empty_weights
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from verl.utils.transformers_compat import drop_tied_target_keys

from .errors import MergeError


# Attention kernels that exist only inside a training run: verl_ext.patches.attention registers "torch_varlen" with
# transformers in verl's workers, and verl saves the actor's config with it. Anywhere else (merge-ppo, vLLM, a
# user's from_pretrained) transformers refuses the name, so a merged model gets the architecture's default.
TRAINING_ONLY_ATTENTION = ("torch_varlen",)


def load_model_config(hf_dir: Path, trust_remote_code: bool) -> PretrainedConfig:
    """Load `config.json` from `hf_dir`; custom (remote-code) architectures need `trust_remote_code`.

    A training-only attention implementation (``TRAINING_ONLY_ATTENTION``) is dropped, so the model builds here
    and the merged ``config.json`` loads without verl-ext.
    """
    try:
        config = AutoConfig.from_pretrained(str(hf_dir), trust_remote_code=trust_remote_code)
        if getattr(config, "_attn_implementation", None) in TRAINING_ONLY_ATTENTION:
            config._attn_implementation = None
        return config
    except ValueError as exc:
        if "trust_remote_code" in str(exc) and not trust_remote_code:
            raise MergeError(
                f"{hf_dir / 'config.json'} needs custom code; re-run with --trust-remote-code if you trust it"
            ) from exc
        raise MergeError(f"cannot load the model config from {hf_dir}: {exc}") from exc
    except Exception as exc:  # OSError, JSON errors, huggingface_hub's strict-dataclass validation errors, ...
        raise MergeError(f"cannot load the model config from {hf_dir}: {type(exc).__name__}: {exc}") from exc


def build_meta_model(config: PretrainedConfig, trust_remote_code: bool) -> PreTrainedModel:
    """Instantiate the causal LM of `config` with meta parameters (no memory); buffers stay real so that
    non-persistent ones (e.g. rotary `inv_freq`) are computed as usual."""
    try:
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        arch = (getattr(config, "architectures", None) or [config.model_type])[0]
        raise MergeError(f"{arch} is not a causal LM architecture merge-ppo can build: {exc}") from exc
    return model


def expected_tensors(model: PreTrainedModel) -> dict[str, tuple[int, ...]]:
    """Names and shapes the saved model must contain (tied aliases such as `lm_head.weight` removed)."""
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    drop_tied_target_keys(shapes, model, model.config)
    return shapes


def tied_aliases(model: PreTrainedModel) -> dict[str, str]:
    """State dict names that alias another parameter under weight tying, mapped to the name that is kept."""
    names = {name: None for name in model.state_dict()}
    drop_tied_target_keys(names, model, model.config)
    canonical_by_id: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in names:
            canonical_by_id.setdefault(id(param), name)
    return {
        name: canonical_by_id[id(param)]
        for name, param in model.named_parameters(remove_duplicate=False)
        if name not in names and id(param) in canonical_by_id
    }


def check_against_architecture(
    names_and_shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], source: str, arch: str
) -> None:
    """Raise a MergeError listing missing/unexpected/misshaped tensors."""
    missing = sorted(set(expected) - set(names_and_shapes))
    unexpected = sorted(set(names_and_shapes) - set(expected))
    misshaped = [
        f"{name}: checkpoint {names_and_shapes[name]} vs config {expected[name]}"
        for name in sorted(set(expected) & set(names_and_shapes))
        if tuple(names_and_shapes[name]) != tuple(expected[name])
    ]
    if missing or unexpected or misshaped:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} (e.g. {unexpected[:3]})")
        if misshaped:
            parts.append(f"shape mismatch {len(misshaped)} (e.g. {misshaped[:2]})")
        raise MergeError(f"unknown layout: the tensors in {source} do not match {arch}: " + "; ".join(parts))


def architecture_name(config: PretrainedConfig) -> str:
    """The architecture name from the config, for messages."""
    return (getattr(config, "architectures", None) or [f"{config.model_type} causal LM"])[0]


def fill_meta_model(model: torch.nn.Module, tensors: dict[str, torch.Tensor], source: str) -> torch.nn.Module:
    """Assign `tensors` (plain transformers names, tied aliases optional) to a meta model and re-tie weights."""
    result = model.load_state_dict(tensors, strict=False, assign=True)
    if result.unexpected_keys:
        raise MergeError(f"{source}: tensors not in {type(model).__name__}: {sorted(result.unexpected_keys)[:5]}")
    # PeftModel has no tie_weights of its own; tie on the transformers model it wraps.
    getattr(model, "get_base_model", lambda: model)().tie_weights()
    still_meta = [name for name, param in model.named_parameters() if param.is_meta]
    if still_meta:
        raise MergeError(f"{source}: no weights for {len(still_meta)} parameters, e.g. {still_meta[:3]}")
    return model.eval()
