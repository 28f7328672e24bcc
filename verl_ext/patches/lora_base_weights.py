"""The base weights that verl 0.9.1's merged LoRA sync backs up, as each rank holds them.

Shared by ``verl_ext.patches.lora_backup`` (which patches verl as soon as it is imported) and ``bench/micro/lora_sync_bench.py``
(which must time verl's own backup first, so it cannot import that module early).
"""

from __future__ import annotations

import torch


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own storage of a parameter: a DTensor's local shard (FSDP2), else the tensor (FSDP1 views)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def base_weights(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, local shard) of what verl backs up: every parameter but the adapter's (its name test,
    ``"lora" not in name.lower()`` in ``verl.utils.fsdp_utils.backup_base_model_weights``)."""
    return [(name, local_shard(p.data)) for name, p in module.named_parameters() if "lora" not in name.lower()]
