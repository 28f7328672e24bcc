"""The merge commands end to end: validate input, write into a staging dir, verify, publish, push.

Full fine-tunes are handled here; LoRA runs and adapters in `lora_pipeline`.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import torch
from transformers import PretrainedConfig
from verl.model_merger.output_validation import validate_hf_model_output

from .architecture import (
    architecture_name,
    build_meta_model,
    check_against_architecture,
    expected_tensors,
    fill_meta_model,
    load_model_config,
    tied_aliases,
)
from .errors import MergeError, VerificationError
from .hf_files import write_model_metadata
from .hub import push_folder, require_token
from .io import guard_output, list_files, staged_output
from .layout import LORA_META_NAME, ActorCheckpoint, load_actor_checkpoint
from .lora import inspect_adapter_tensors, is_adapter_key
from .lora_pipeline import merge_adapter, merge_lora_checkpoint
from .options import (
    AdapterMergeOptions,
    CheckpointMergeOptions,
    MergeReport,
    dominant_float_dtype,
    output_dtype,
    resolve_dtype,
)
from .shards import ShardReader, TensorInfo, build_tensor_index
from .verify import (
    Check,
    compare,
    fp32_logits,
    load_reference_state_dict,
    load_written_model,
    probe_input_ids,
    raise_on_failure,
)
from .writer import PlannedTensor, parse_size, write_weights

__all__ = [
    "AdapterMergeOptions",
    "CheckpointMergeOptions",
    "MergeReport",
    "describe_checkpoint",
    "merge_adapter",
    "merge_checkpoint",
]

logger = logging.getLogger(__name__)


def merge_checkpoint(opts: CheckpointMergeOptions) -> MergeReport:
    """Merge a verl FSDP actor checkpoint into a Hugging Face model (full fine-tune) or PEFT adapter (LoRA)."""
    dtype = resolve_dtype(opts.dtype)
    max_shard_bytes = parse_size(opts.max_shard_size)
    if opts.push_to_hub:
        require_token()
    ckpt = load_actor_checkpoint(Path(opts.checkpoint), opts.step)
    guard_output(Path(opts.output), ckpt.actor_dir, opts.force)
    logger.info(
        "checkpoint %s (step %s, world size %d, FSDP v%s)", ckpt.actor_dir, ckpt.step, ckpt.world_size,
        ckpt.fsdp_version,
    )
    config = load_model_config(ckpt.hf_dir, opts.trust_remote_code)
    reader = ShardReader(ckpt.model_files, allow_unsafe_pickle=opts.allow_unsafe_pickle)
    index = build_tensor_index(reader.open_all(), ckpt.model_files)
    try:
        if any(is_adapter_key(name) for name in index):
            report = merge_lora_checkpoint(opts, ckpt, config, reader, index, dtype, max_shard_bytes)
        else:
            if ckpt.lora_meta is not None:
                raise MergeError(f"{ckpt.actor_dir / LORA_META_NAME} exists but the shards hold no LoRA tensors")
            if opts.merge_lora:
                raise MergeError("--merge-lora was given but the checkpoint is a full fine-tune (no LoRA tensors)")
            report = _merge_full_checkpoint(opts, ckpt, config, reader, index, dtype, max_shard_bytes)
    finally:
        reader.release()
    if opts.push_to_hub:
        report.hub_url = push_folder(
            report.output, opts.push_to_hub, opts.private, f"merge-ppo: {ckpt.actor_dir.parent.name}"
        )
    return report


def _merge_full_checkpoint(
    opts: CheckpointMergeOptions,
    ckpt: ActorCheckpoint,
    config: PretrainedConfig,
    reader: ShardReader,
    index: dict[str, TensorInfo],
    dtype: torch.dtype | None,
    max_shard_bytes: int,
) -> MergeReport:
    meta_model = build_meta_model(config, opts.trust_remote_code)
    aliases = tied_aliases(meta_model)
    names = [name for name in index if name not in aliases]
    check_against_architecture(
        {n: index[n].shape for n in names}, expected_tensors(meta_model), str(ckpt.actor_dir), architecture_name(config)
    )
    plan = [PlannedTensor(n, index[n].shape, output_dtype(index[n].dtype, dtype)) for n in names]
    config_dtype = dtype or dominant_float_dtype(p.dtype for p in plan)

    with staged_output(Path(opts.output), opts.force) as stage:
        write_weights(
            stage, plan, lambda p: reader.iter_byte_chunks(index[p.name], p.dtype), max_shard_bytes, opts.progress
        )
        reader.release()
        write_model_metadata(ckpt.hf_dir, stage, config, config_dtype)
        validate_hf_model_output(stage)
        checks = _verify_full(opts, ckpt, config, stage, names, aliases, dtype) if opts.verify else []
        files = list_files(stage)
    return MergeReport(Path(opts.output), "full model", str(ckpt.actor_dir), files, checks)


def _verify_full(
    opts: CheckpointMergeOptions,
    ckpt: ActorCheckpoint,
    config: PretrainedConfig,
    written_dir: Path,
    names: list[str],
    aliases: dict[str, str],
    dtype: torch.dtype | None,
) -> list[Check]:
    logger.info("verifying: loading the shards directly and the written model")
    # Cast to the output dtype, so reference and written model hold the same numbers (computed in fp32).
    full = load_reference_state_dict(ckpt.model_files, opts.allow_unsafe_pickle, round_to=dtype, tied_aliases=aliases)
    if set(full) != set(names):
        raise VerificationError(f"reference loader found other tensors: {sorted(set(full) ^ set(names))[:5]}")
    reference = fill_meta_model(build_meta_model(config, opts.trust_remote_code), full, "shards")
    del full
    input_ids = probe_input_ids(written_dir, config.get_text_config().vocab_size, opts.trust_remote_code)
    want = fp32_logits(reference, input_ids)
    del reference
    got = fp32_logits(load_written_model(written_dir, opts.trust_remote_code), input_ids)
    checks = [compare("written model vs shards", got, want)]
    raise_on_failure(checks)
    return checks


def describe_checkpoint(path: Path, step: int | None, allow_unsafe_pickle: bool = False) -> str:
    """Human-readable summary of a checkpoint's layout (for `merge-ppo inspect`)."""
    ckpt = load_actor_checkpoint(Path(path), step)
    reader = ShardReader(ckpt.model_files, allow_unsafe_pickle=allow_unsafe_pickle)
    index = build_tensor_index(reader.open_all(), ckpt.model_files)
    reader.release()
    adapter = {n: i for n, i in index.items() if is_adapter_key(n)}
    by_dtype = Counter()
    for info in index.values():
        by_dtype[str(info.dtype).replace("torch.", "")] += info.nbytes
    lines = [
        f"actor dir:     {ckpt.actor_dir}",
        f"step:          {ckpt.step if ckpt.step is not None else 'unknown'}",
        f"world size:    {ckpt.world_size} (FSDP v{ckpt.fsdp_version})",
        f"tensors:       {len(index)} ({', '.join(f'{d}: {b / 1e6:.1f} MB' for d, b in by_dtype.items())})",
    ]
    if adapter:
        shapes = inspect_adapter_tensors({n: i.shape for n, i in adapter.items()})
        alpha = ckpt.lora_meta.alpha if ckpt.lora_meta else "unknown"
        only = " (LoRA weights only)" if len(adapter) == len(index) else ""
        targets = list(shapes.target_modules)
        lines.append(f"kind:          LoRA{only}: r={shapes.rank}, alpha={alpha}, targets={targets}")
    else:
        lines.append("kind:          full fine-tune")
    sharded = sorted({(i.shard_dim, len(i.ranks)) for i in index.values()}, key=str)
    lines.append(f"sharding:      {', '.join(f'dim {d} over {n} ranks' for d, n in sharded)}")
    return "\n".join(lines)
