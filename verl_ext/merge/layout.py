"""Find and validate verl's on-disk FSDP checkpoint layouts (PPO/GRPO actor and SFT).

verl 0.9.1's PPO trainer (`FSDPCheckpointManager.save_checkpoint` + `RayPPOTrainer._save_checkpoint`) writes::

    <default_local_dir>/
        latest_checkpointed_iteration.txt          # "N", written after the step is fully saved
        global_step_N/
            data.pt                                # dataloader state
            actor/
                model_world_size_W_rank_R.pt       # one sharded state dict (DTensors) per rank
                optim_world_size_W_rank_R.pt       # optimizer shards (ignored here)
                extra_state_world_size_W_rank_R.pt # lr scheduler + RNG (ignored here)
                fsdp_config.json                   # {"FSDP_version": 1|2, "world_size": W}
                lora_train_meta.json               # LoRA runs only: {"r", "lora_alpha", "task_type"}
                huggingface/                       # config, tokenizer, generation config (+ weights if hf_model saved)

Its SFT trainer (`verl.trainer.sft_trainer`, `CheckpointHandler`) writes the same files one level up, with no
``actor/`` folder: ``global_step_N/{model_world_size_W_rank_R.pt, fsdp_config.json, huggingface/, data_0.pt}``.
Both are accepted wherever a checkpoint path is (the step folder itself then plays the actor folder's part).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import MergeError

MODEL_SHARD_PATTERN = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
STEP_DIR_PATTERN = re.compile(r"^global_step_(\d+)$")
FSDP_CONFIG_NAME = "fsdp_config.json"
LORA_META_NAME = "lora_train_meta.json"
HF_SUBDIR = "huggingface"
# = verl.utils.checkpoint.checkpoint_manager.get_checkpoint_tracker_filename(); importing that module would pull
# in verl's trainer and engine stack (+150 MB RSS, accelerator warnings) for one file name.
TRACKER_NAME = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class LoraTrainMeta:
    """Contents of verl's `lora_train_meta.json`."""

    rank: int
    alpha: float | None
    task_type: str


@dataclass(frozen=True)
class ActorCheckpoint:
    """A validated verl FSDP actor checkpoint directory."""

    actor_dir: Path
    world_size: int
    fsdp_version: int | None
    model_files: tuple[Path, ...]  # index = rank
    hf_dir: Path
    lora_meta: LoraTrainMeta | None
    step: int | None


def read_latest_step(experiment_dir: Path) -> int:
    """Return the step recorded in `latest_checkpointed_iteration.txt` of an experiment dir."""
    tracker = experiment_dir / TRACKER_NAME
    if not tracker.is_file():
        steps = available_steps(experiment_dir)
        hint = f"; available steps: {', '.join(map(str, steps))} (pass --step N)" if steps else ""
        raise MergeError(f"no {tracker.name} in {experiment_dir}{hint}")
    text = tracker.read_text(encoding="utf-8", errors="replace").strip()
    if not text.isdigit():
        raise MergeError(f"{tracker} should contain a step number, found {text[:40]!r}")
    return int(text)


def available_steps(experiment_dir: Path) -> list[int]:
    """Steps that have a `global_step_N/` directory, ascending."""
    steps = []
    for child in experiment_dir.iterdir():
        match = STEP_DIR_PATTERN.match(child.name)
        if match and child.is_dir():
            steps.append(int(match.group(1)))
    return sorted(steps)


def _looks_like_actor_dir(path: Path) -> bool:
    return (path / FSDP_CONFIG_NAME).exists() or any(MODEL_SHARD_PATTERN.match(p.name) for p in path.iterdir())


def _looks_like_megatron(path: Path) -> bool:
    return any((path / sub).exists() for sub in ("dist_ckpt", "model/dist_ckpt", "model/huggingface"))


def resolve_actor_dir(path: Path, step: int | None = None, role: str = "actor") -> tuple[Path, int | None]:
    """Map an experiment dir, a `global_step_N` dir or an actor dir to the actor dir (and its step).

    `step=None` means "latest" for experiment dirs; an explicit step is only valid for experiment dirs.
    """
    path = Path(path)
    if not path.exists():
        raise MergeError(f"checkpoint path does not exist: {path}")
    if not path.is_dir():
        raise MergeError(f"checkpoint path is not a directory: {path}")

    if _looks_like_actor_dir(path):
        if step is not None:
            raise MergeError(f"--step only applies to an experiment dir, but {path} is already a {role} dir")
        # PPO: global_step_N/actor/; SFT: the step folder itself holds the shards
        step_of_path = STEP_DIR_PATTERN.match(path.name) or STEP_DIR_PATTERN.match(path.parent.name)
        return path, int(step_of_path.group(1)) if step_of_path else None
    if (path / role).is_dir():
        if step is not None:
            raise MergeError(f"--step only applies to an experiment dir, but {path} is a step dir")
        match = STEP_DIR_PATTERN.match(path.name)
        return resolve_actor_dir(path / role, None, role)[0], int(match.group(1)) if match else None
    is_experiment_dir = (path / TRACKER_NAME).exists() or available_steps(path)
    if is_experiment_dir:
        chosen = read_latest_step(path) if step is None else step
        step_dir = path / f"global_step_{chosen}"
        if not step_dir.is_dir():
            steps = ", ".join(map(str, available_steps(path))) or "none"
            raise MergeError(f"step {chosen} has no directory {step_dir} (available steps: {steps})")
        actor_dir = step_dir / role
        if not actor_dir.is_dir():
            if _looks_like_actor_dir(step_dir):  # an SFT checkpoint: no actor/ level
                return step_dir, chosen
            raise MergeError(f"{step_dir} has no {role}/ directory (nor model shards of an SFT checkpoint)")
        return resolve_actor_dir(actor_dir, None, role)[0], chosen
    if _looks_like_megatron(path):
        raise MergeError(
            f"{path} looks like a Megatron checkpoint; merge-ppo handles FSDP checkpoints only. "
            "Use: python -m verl.model_merger merge --backend megatron --local_dir ... --target_dir ..."
        )
    entries = sorted(p.name for p in path.iterdir())[:10]
    raise MergeError(
        f"unknown checkpoint layout at {path}: expected an experiment dir (with global_step_N/ or "
        f"latest_checkpointed_iteration.txt), a global_step_N dir or an actor dir with "
        f"model_world_size_W_rank_R.pt + fsdp_config.json; found {entries or 'an empty directory'}"
    )


def read_world_size(actor_dir: Path) -> tuple[int, int | None]:
    """Return (world_size, FSDP version) from `fsdp_config.json`."""
    config_path = actor_dir / FSDP_CONFIG_NAME
    if not config_path.is_file():
        raise MergeError(f"missing {config_path} (verl writes it next to the model shards)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MergeError(f"corrupt {config_path}: {exc}") from exc
    world_size = config.get("world_size") if isinstance(config, dict) else None
    if not isinstance(world_size, int) or world_size < 1:
        raise MergeError(f"{config_path} has no valid 'world_size' (found {world_size!r})")
    fsdp_version = config.get("FSDP_version")
    return world_size, fsdp_version if isinstance(fsdp_version, int) else None


def find_model_shards(actor_dir: Path, world_size: int) -> tuple[Path, ...]:
    """Return the rank-ordered model shard files, checking they match `world_size`."""
    found: dict[int, dict[int, Path]] = {}
    for child in actor_dir.iterdir():
        match = MODEL_SHARD_PATTERN.match(child.name)
        if match:
            found.setdefault(int(match.group(1)), {})[int(match.group(2))] = child
    if not found:
        raise MergeError(f"no model_world_size_*_rank_*.pt files in {actor_dir}")
    if world_size not in found:
        sizes = ", ".join(f"world size {w} ({len(ranks)} files)" for w, ranks in sorted(found.items()))
        raise MergeError(
            f"world-size mismatch in {actor_dir}: {FSDP_CONFIG_NAME} says world_size={world_size} "
            f"but the model shards are for {sizes}"
        )
    ranks = found[world_size]
    missing = [r for r in range(world_size) if r not in ranks]
    if missing:
        names = ", ".join(f"model_world_size_{world_size}_rank_{r}.pt" for r in missing)
        raise MergeError(f"missing model shard(s) in {actor_dir}: {names}")
    extra = sorted(r for r in ranks if r >= world_size)
    if extra:
        raise MergeError(f"unexpected shard rank(s) {extra} >= world_size={world_size} in {actor_dir}")
    return tuple(ranks[r] for r in range(world_size))


def read_lora_meta(actor_dir: Path) -> LoraTrainMeta | None:
    """Parse `lora_train_meta.json`; None for full fine-tunes."""
    meta_path = actor_dir / LORA_META_NAME
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MergeError(f"corrupt {meta_path}: {exc}") from exc
    if not isinstance(meta, dict):
        raise MergeError(f"{meta_path} must hold a JSON object, found {type(meta).__name__}")
    rank = meta.get("r")
    if not isinstance(rank, int) or rank <= 0:
        raise MergeError(f"{meta_path}: 'r' must be a positive integer, found {rank!r}")
    alpha = meta.get("lora_alpha")
    if alpha is not None and (not isinstance(alpha, (int, float)) or alpha <= 0):
        raise MergeError(f"{meta_path}: 'lora_alpha' must be a positive number, found {alpha!r}")
    task_type = meta.get("task_type") or "CAUSAL_LM"
    return LoraTrainMeta(rank=rank, alpha=alpha, task_type=str(task_type))


def load_actor_checkpoint(path: Path, step: int | None = None) -> ActorCheckpoint:
    """Resolve `path` (experiment, step or actor dir) and validate the files the merge needs."""
    actor_dir, resolved_step = resolve_actor_dir(Path(path), step)
    world_size, fsdp_version = read_world_size(actor_dir)
    model_files = find_model_shards(actor_dir, world_size)
    hf_dir = actor_dir / HF_SUBDIR
    if not (hf_dir / "config.json").is_file():
        raise MergeError(f"missing {hf_dir / 'config.json'} (verl saves the model config and tokenizer there)")
    return ActorCheckpoint(
        actor_dir=actor_dir,
        world_size=world_size,
        fsdp_version=fsdp_version,
        model_files=model_files,
        hf_dir=hf_dir,
        lora_meta=read_lora_meta(actor_dir),
        step=resolved_step,
    )
