"""The merge commands end to end: validate input, write into a staging dir, verify, publish, push."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
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
from .hf_files import copy_tokenizer_files, write_model_metadata
from .hub import push_folder, require_token
from .io import check_target, staged_output
from .layout import LORA_META_NAME, ActorCheckpoint, load_actor_checkpoint
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
from .shards import ShardReader, TensorInfo, build_tensor_index
from .verify import (
    Check,
    assert_same_weights,
    compare,
    fp32_logits,
    load_reference_state_dict,
    load_written_model,
    probe_input_ids,
    raise_on_failure,
)
from .writer import PlannedTensor, ShardedSafetensorsWriter, parse_size

if TYPE_CHECKING:
    from peft import LoraConfig

logger = logging.getLogger("verl_ext.merge")

DTYPES: dict[str, torch.dtype | None] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "auto": None,  # keep the checkpoint's dtype
}
LORA_ADAPTER_SUBDIR = "lora_adapter"


@dataclass
class CheckpointMergeOptions:
    """Options of `merge-ppo [checkpoint]`."""

    checkpoint: Path
    output: Path
    step: int | None = None
    dtype: str = "bfloat16"
    max_shard_size: str = "5GB"
    merge_lora: bool = False
    base_model: str | None = None
    lora_alpha: float | None = None
    force: bool = False
    verify: bool = False
    push_to_hub: str | None = None
    private: bool = False
    trust_remote_code: bool = False
    allow_unsafe_pickle: bool = False
    progress: bool = True


@dataclass
class AdapterMergeOptions:
    """Options of `merge-ppo adapter`."""

    adapter: str
    output: Path
    base: str | None = None
    dtype: str = "bfloat16"
    max_shard_size: str = "5GB"
    force: bool = False
    verify: bool = False
    push_to_hub: str | None = None
    private: bool = False
    trust_remote_code: bool = False
    progress: bool = True


@dataclass
class MergeReport:
    """What a merge wrote and how it was checked."""

    output: Path
    kind: str
    source: str
    files: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    hub_url: str | None = None

    def summary(self) -> str:
        lines = [f"wrote {self.kind} from {self.source} to {self.output}", f"files: {', '.join(self.files)}"]
        lines += [f"verify: {check.describe()}" for check in self.checks]
        if self.hub_url:
            lines.append(f"pushed: {self.hub_url}")
        return "\n".join(lines)


def resolve_dtype(name: str) -> torch.dtype | None:
    """Map a `--dtype` value to a torch dtype (None for 'auto')."""
    if name not in DTYPES:
        raise MergeError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _output_dtype(source: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    return requested if requested is not None and source.is_floating_point else source


def _dominant_float_dtype(dtypes: Iterable[torch.dtype]) -> torch.dtype:
    counts = Counter(d for d in dtypes if d.is_floating_point)
    return counts.most_common(1)[0][0] if counts else torch.float32


def _list_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def write_weights(
    out_dir: Path,
    plan: list[PlannedTensor],
    chunks_for: Callable[[PlannedTensor], Iterable[torch.Tensor]],
    max_shard_bytes: int,
    progress: bool,
) -> None:
    """Stream every planned tensor into sharded safetensors files (+ index), with a progress bar."""
    writer = ShardedSafetensorsWriter(out_dir, plan, max_shard_bytes)
    try:
        with tqdm(
            total=writer.total_bytes, unit="B", unit_scale=True, desc="writing weights", disable=not progress
        ) as bar:
            for planned in plan:
                writer.write(planned.name, chunks_for(planned))
                bar.update(planned.nbytes)
        writer.close()
    except BaseException:
        writer.abort()
        raise


def _guard_output(output: Path, protected: Path, force: bool) -> None:
    check_target(output, force)
    if protected.resolve().is_relative_to(output.resolve()):
        raise MergeError(f"output directory {output} contains the input {protected}; choose another output path")


def merge_checkpoint(opts: CheckpointMergeOptions) -> MergeReport:
    """Merge a verl FSDP actor checkpoint into a Hugging Face model (full fine-tune) or PEFT adapter (LoRA)."""
    dtype = resolve_dtype(opts.dtype)
    max_shard_bytes = parse_size(opts.max_shard_size)
    if opts.push_to_hub:
        require_token()
    ckpt = load_actor_checkpoint(Path(opts.checkpoint), opts.step)
    _guard_output(Path(opts.output), ckpt.actor_dir, opts.force)
    logger.info(
        "checkpoint %s (step %s, world size %d, FSDP v%s)", ckpt.actor_dir, ckpt.step, ckpt.world_size,
        ckpt.fsdp_version,
    )
    config = load_model_config(ckpt.hf_dir, opts.trust_remote_code)
    reader = ShardReader(ckpt.model_files, allow_unsafe_pickle=opts.allow_unsafe_pickle)
    index = build_tensor_index(reader.open_all(), ckpt.model_files)
    try:
        if any(is_adapter_key(name) for name in index):
            report = _merge_lora_checkpoint(opts, ckpt, config, reader, index, dtype, max_shard_bytes)
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
    plan = [PlannedTensor(n, index[n].shape, _output_dtype(index[n].dtype, dtype)) for n in names]
    config_dtype = dtype or _dominant_float_dtype(p.dtype for p in plan)

    with staged_output(Path(opts.output), opts.force) as stage:
        write_weights(
            stage, plan, lambda p: reader.iter_byte_chunks(index[p.name], p.dtype), max_shard_bytes, opts.progress
        )
        reader.release()
        write_model_metadata(ckpt.hf_dir, stage, config, config_dtype)
        validate_hf_model_output(stage)
        checks = _verify_full(opts, ckpt, config, stage, names, aliases, dtype) if opts.verify else []
        files = _list_files(stage)
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


def _merge_lora_checkpoint(
    opts: CheckpointMergeOptions,
    ckpt: ActorCheckpoint,
    config: PretrainedConfig,
    reader: ShardReader,
    index: dict[str, TensorInfo],
    dtype: torch.dtype | None,
    max_shard_bytes: int,
) -> MergeReport:
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
            if opts.merge_lora:
                merged = merge_and_unload(peft_model)
                checks += _write_merged_model(
                    merged, stage, ckpt.hf_dir, config, dtype, max_shard_bytes, opts, input_ids, adapter_logits
                )
        files = _list_files(stage)
    return MergeReport(Path(opts.output), kind, str(ckpt.actor_dir), files, checks)


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
    plan = [PlannedTensor(n, tuple(state[n].shape), _output_dtype(state[n].dtype, dtype)) for n in names]
    write_weights(stage, plan, lambda p: [state[p.name].to(p.dtype).contiguous()], max_shard_bytes, opts.progress)
    write_model_metadata(metadata_dir, stage, config, dtype or _dominant_float_dtype(p.dtype for p in plan))
    validate_hf_model_output(stage)
    if adapter_logits is not None:
        written = load_written_model(stage, opts.trust_remote_code)
        count = assert_same_weights(written, state, {p.name: p.dtype for p in plan}, "written merged model")
        logger.info("written merged model: %d tensors identical to the fp32 merge cast to %s", count, plan[0].dtype)
        got = fp32_logits(written, input_ids)
        exact = all(p.dtype == torch.float32 for p in plan if state[p.name].is_floating_point())
        label = "written merged model vs base+adapter"
        checks.append(compare(label, got, adapter_logits, tolerance=1e-4 if exact else None))
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
    _guard_output(Path(opts.output), adapter_dir, opts.force)
    _guard_output(Path(opts.output), base_dir, opts.force)
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
        files = _list_files(stage)
    report = MergeReport(Path(opts.output), "merged model", f"{adapter_dir} + {base_dir}", files, checks)
    if opts.push_to_hub:
        report.hub_url = push_folder(report.output, opts.push_to_hub, opts.private, "merge-ppo adapter merge")
    return report


def _adapter_base_reference(adapter_dir: Path) -> str:
    import json

    config = json.loads((adapter_dir / ADAPTER_CONFIG_NAME).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise MergeError(f"{adapter_dir / ADAPTER_CONFIG_NAME} names no base model; pass --base")
    return str(base)


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
