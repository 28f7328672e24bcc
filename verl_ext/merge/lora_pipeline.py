"""LoRA runs and adapters: export verl's LoRA shards as a PEFT adapter, merge adapters with PEFT, verify."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from verl.model_merger.output_validation import validate_hf_model_output

from .architecture import (
    architecture_name,
    build_meta_model,
    check_against_architecture,
    fill_meta_model,
    load_model_config,
    tied_aliases,
)
from .errors import MergeError
from .hf_files import copy_tokenizer_files, write_model_metadata
from .hub import push_folder, require_token
from .io import guard_output, list_files, staged_output
from .layout import LORA_META_NAME, ActorCheckpoint
from .lora import (
    ADAPTER_CONFIG_NAME,
    attach_adapter,
    base_model_key,
    build_meta_peft_model,
    inspect_adapter_tensors,
    is_adapter_key,
    make_lora_config,
    merge_and_unload,
    wrap_with_lora,
    write_adapter,
)
from .options import (
    AdapterMergeOptions,
    CheckpointMergeOptions,
    MergeReport,
    dominant_float_dtype,
    output_dtype,
    resolve_dtype,
)
from .shards import ShardReader, TensorInfo
from .verify import (
    SCALED,
    Check,
    assert_same_weights,
    compare,
    fp32_logits,
    load_reference_state_dict,
    load_written_model,
    probe_input_ids,
    raise_on_failure,
)
from .writer import PlannedTensor, parse_size, write_weights

if TYPE_CHECKING:
    from peft import LoraConfig

logger = logging.getLogger(__name__)
LORA_ADAPTER_SUBDIR = "lora_adapter"


def merge_lora_checkpoint(
    opts: CheckpointMergeOptions,
    ckpt: ActorCheckpoint,
    config: PretrainedConfig,
    reader: ShardReader,
    index: dict[str, TensorInfo],
    dtype: torch.dtype | None,
    max_shard_bytes: int,
) -> MergeReport:
    """LoRA run: write the PEFT adapter; with --merge-lora also the merged model (adapter in lora_adapter/)."""
    adapter_infos = {name: info for name, info in index.items() if is_adapter_key(name)}
    base_names = [name for name in index if name not in adapter_infos]
    shapes = inspect_adapter_tensors({name: info.shape for name, info in adapter_infos.items()})
    lora_config = make_lora_config(
        shapes, ckpt.lora_meta, opts.lora_alpha, opts.base_model, ckpt.actor_dir / LORA_META_NAME
    )
    meta_peft = build_meta_peft_model(config, lora_config, opts.trust_remote_code)
    expected = {name: tuple(t.shape) for name, t in meta_peft.state_dict().items()}
    arch = f"{architecture_name(config)} + LoRA(r={shapes.rank}, {', '.join(shapes.target_modules)})"
    if base_names:
        check_against_architecture({n: i.shape for n, i in index.items()}, expected, str(ckpt.actor_dir), arch)
    else:
        expected_adapter = {n: s for n, s in expected.items() if is_adapter_key(n)}
        check_against_architecture(
            {n: i.shape for n, i in adapter_infos.items()}, expected_adapter, str(ckpt.actor_dir), arch
        )
        if (opts.merge_lora or opts.verify) and not opts.base_model:
            flag = "--merge-lora" if opts.merge_lora else "--verify"
            raise MergeError(
                f"{ckpt.actor_dir} holds only LoRA weights (checkpoint.save_lora_only); "
                f"{flag} needs --base-model (the base model dir or Hub id the run started from)"
            )
    # Adapters are small: keep them in the training dtype, exactly as trained.
    lora_tensors = {name: reader.full_tensor(info) for name, info in adapter_infos.items()}
    kind = "merged model + LoRA adapter" if opts.merge_lora else "LoRA adapter"

    with staged_output(Path(opts.output), opts.force) as stage:
        adapter_dir = stage / LORA_ADAPTER_SUBDIR if opts.merge_lora else stage
        write_adapter(adapter_dir, meta_peft, lora_tensors)
        copy_tokenizer_files(ckpt.hf_dir, adapter_dir)
        checks: list[Check] = []
        if opts.verify or opts.merge_lora:
            input_ids = probe_input_ids(adapter_dir, config.get_text_config().vocab_size, opts.trust_remote_code)
            reference_logits = (
                _reference_peft_logits(opts, ckpt, config, lora_config, base_names, input_ids) if opts.verify else None
            )
            base = _lora_base_model(opts, config, reader, index, base_names)
            reader.release()
            peft_model = attach_adapter(base, adapter_dir)
            adapter_logits = fp32_logits(peft_model, input_ids) if opts.verify else None
            if reference_logits is not None:
                checks.append(compare("exported adapter on base vs shards", adapter_logits, reference_logits))
                raise_on_failure(checks)
                checks.append(adapter_effect(peft_model, input_ids, adapter_logits, lora_tensors))
            if opts.merge_lora:
                merged = merge_and_unload(peft_model)
                checks += _write_merged_model(
                    merged, stage, ckpt.hf_dir, config, dtype, max_shard_bytes, opts, input_ids, adapter_logits
                )
        files = list_files(stage)
    return MergeReport(Path(opts.output), kind, str(ckpt.actor_dir), files, checks)


def adapter_effect(peft_model: torch.nn.Module, input_ids: torch.Tensor, adapter_logits: torch.Tensor,
                   lora_tensors: dict[str, torch.Tensor]) -> Check:
    """How far the adapter moves the base model's logits (informational); warns when it moves nothing.

    A LoRA run whose reward never varied keeps every ``lora_B`` at its zero init: the merge is then exact but
    the "trained" model is the base model, which the other checks cannot tell.
    """
    with torch.no_grad(), peft_model.disable_adapter():
        base_logits = fp32_logits(peft_model, input_ids)
    largest_b = max((float(t.abs().max()) for name, t in lora_tensors.items() if "lora_B" in name), default=0.0)
    effect = compare(f"adapter effect, base vs base+adapter (max |lora_B| {largest_b:.3e})", adapter_logits,
                     base_logits, tolerance=None)
    if effect.max_abs_diff == 0.0:
        logger.warning("the LoRA adapter does not change the model's logits (max |lora_B| = %.3e): the run "
                       "learned nothing", largest_b)
    return effect


def _lora_base_model(
    opts: CheckpointMergeOptions,
    config: PretrainedConfig,
    reader: ShardReader,
    index: dict[str, TensorInfo],
    base_names: list[str],
) -> PreTrainedModel:
    """The base weights in float32: from the shards (frozen `base_layer` weights) or from --base-model."""
    if base_names:
        tensors = {base_model_key(n): reader.full_tensor(index[n], torch.float32) for n in base_names}
        return fill_meta_model(build_meta_model(config, opts.trust_remote_code), tensors, "checkpoint base weights")
    assert opts.base_model is not None
    return _load_base_model(opts.base_model, opts.trust_remote_code)


def _load_base_model(base: str, trust_remote_code: bool) -> PreTrainedModel:
    base_dir = resolve_model_dir(base, "base model")
    try:
        return AutoModelForCausalLM.from_pretrained(
            str(base_dir), dtype=torch.float32, trust_remote_code=trust_remote_code
        ).eval()
    except (OSError, ValueError) as exc:
        raise MergeError(f"cannot load the base model from {base_dir}: {exc}") from exc


def _reference_peft_logits(
    opts: CheckpointMergeOptions,
    ckpt: ActorCheckpoint,
    config: PretrainedConfig,
    lora_config: LoraConfig,
    base_names: list[str],
    input_ids: torch.Tensor,
) -> torch.Tensor:
    """Logits of the PEFT model rebuilt from the raw shards (keys as verl saved them, adapter unmerged)."""
    full = load_reference_state_dict(ckpt.model_files, opts.allow_unsafe_pickle, round_to=torch.float32)
    if base_names:
        model = fill_meta_model(build_meta_peft_model(config, lora_config, opts.trust_remote_code), full, "shards")
    else:
        assert opts.base_model is not None
        model = wrap_with_lora(_load_base_model(opts.base_model, opts.trust_remote_code), lora_config)
        result = model.load_state_dict(full, strict=False)
        missing_lora = [k for k in result.missing_keys if is_adapter_key(k)]
        if result.unexpected_keys or missing_lora:
            raise MergeError(
                f"LoRA shards do not fit the base model: unexpected {result.unexpected_keys[:3]}, "
                f"missing {missing_lora[:3]}"
            )
    return fp32_logits(model, input_ids)


def _write_merged_model(
    merged: PreTrainedModel,
    stage: Path,
    metadata_dir: Path,
    config: PretrainedConfig,
    dtype: torch.dtype | None,
    max_shard_bytes: int,
    opts: CheckpointMergeOptions | AdapterMergeOptions,
    input_ids: torch.Tensor,
    adapter_logits: torch.Tensor | None,
) -> list[Check]:
    """Write an in-memory merged model (float32) in `dtype`; verify it if `adapter_logits` is given."""
    checks: list[Check] = []
    if adapter_logits is not None:
        checks.append(compare("merged (fp32) vs base+adapter", fp32_logits(merged, input_ids), adapter_logits))
        raise_on_failure(checks)
    state = merged.state_dict()
    aliases = tied_aliases(merged)
    names = [name for name in state if name not in aliases]
    plan = [PlannedTensor(n, tuple(state[n].shape), output_dtype(state[n].dtype, dtype)) for n in names]
    write_weights(stage, plan, lambda p: [state[p.name].to(p.dtype).contiguous()], max_shard_bytes, opts.progress)
    write_model_metadata(metadata_dir, stage, config, dtype or dominant_float_dtype(p.dtype for p in plan))
    validate_hf_model_output(stage)
    if adapter_logits is not None:
        written = load_written_model(stage, opts.trust_remote_code)
        count = assert_same_weights(written, state, {p.name: p.dtype for p in plan}, "written merged model")
        logger.info("written merged model: %d tensors identical to the fp32 merge cast to %s", count, plan[0].dtype)
        got = fp32_logits(written, input_ids)
        exact = all(p.dtype == torch.float32 for p in plan if state[p.name].is_floating_point())
        label = "written merged model vs base+adapter"
        checks.append(compare(label, got, adapter_logits, tolerance=SCALED if exact else None))
        raise_on_failure(checks)
    return checks


def resolve_model_dir(ref: str, what: str) -> Path:
    """A local model/adapter dir, or a Hub repo id downloaded (config, tokenizer, safetensors) to the HF cache."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path
    looks_like_repo_id = ref.count("/") == 1 and not ref.startswith((".", "/", "~"))
    if not looks_like_repo_id:
        raise MergeError(f"{what} {ref!r} is not a directory")
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                repo_id=ref,
                allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py"],
            )
        )
    except Exception as exc:  # network/auth errors differ between huggingface-hub versions
        raise MergeError(f"{what} {ref!r} is not a local directory and could not be downloaded: {exc}") from exc


def merge_adapter(opts: AdapterMergeOptions) -> MergeReport:
    """Merge any PEFT LoRA adapter dir into its base model with PEFT's `merge_and_unload`."""
    dtype = resolve_dtype(opts.dtype)
    max_shard_bytes = parse_size(opts.max_shard_size)
    if opts.push_to_hub:
        require_token()
    adapter_dir = resolve_model_dir(opts.adapter, "adapter")
    if not (adapter_dir / ADAPTER_CONFIG_NAME).is_file():
        raise MergeError(f"{adapter_dir} has no {ADAPTER_CONFIG_NAME}; is it a PEFT adapter dir?")
    base_ref = opts.base or _adapter_base_reference(adapter_dir)
    base_dir = resolve_model_dir(base_ref, "base model")
    guard_output(Path(opts.output), adapter_dir, opts.force)
    guard_output(Path(opts.output), base_dir, opts.force)
    config = load_model_config(base_dir, opts.trust_remote_code)
    tokenizer_dir = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base_dir

    with staged_output(Path(opts.output), opts.force) as stage:
        base = _load_base_model(str(base_dir), opts.trust_remote_code)
        peft_model = attach_adapter(base, adapter_dir)
        input_ids = probe_input_ids(tokenizer_dir, config.get_text_config().vocab_size, opts.trust_remote_code)
        adapter_logits = fp32_logits(peft_model, input_ids) if opts.verify else None
        merged = merge_and_unload(peft_model)
        checks = _write_merged_model(
            merged, stage, base_dir, config, dtype, max_shard_bytes, opts, input_ids, adapter_logits
        )
        if tokenizer_dir == adapter_dir:
            copy_tokenizer_files(adapter_dir, stage)
        files = list_files(stage)
    report = MergeReport(Path(opts.output), "merged model", f"{adapter_dir} + {base_dir}", files, checks)
    if opts.push_to_hub:
        report.hub_url = push_folder(report.output, opts.push_to_hub, opts.private, "merge-ppo adapter merge")
    return report


def _adapter_base_reference(adapter_dir: Path) -> str:
    config = json.loads((adapter_dir / ADAPTER_CONFIG_NAME).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise MergeError(f"{adapter_dir / ADAPTER_CONFIG_NAME} names no base model; pass --base")
    return str(base)
