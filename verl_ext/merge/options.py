"""Options and results of the merge commands, and the `--dtype` mapping."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import MergeError
from .verify import Check

DTYPES: dict[str, torch.dtype | None] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "auto": None,  # keep the checkpoint's dtype
}


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


def output_dtype(source: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """The dtype a tensor is written in: `requested` for floating tensors (None keeps `source`)."""
    return requested if requested is not None and source.is_floating_point else source


def dominant_float_dtype(dtypes: Iterable[torch.dtype]) -> torch.dtype:
    """The most common floating dtype (for config.json's `dtype`), float32 if there is none."""
    counts = Counter(d for d in dtypes if d.is_floating_point)
    return counts.most_common(1)[0][0] if counts else torch.float32
