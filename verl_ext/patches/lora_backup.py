"""Reusable (pinned) host buffers for the base-weight backup of verl's merged LoRA weight sync.

With ``model.lora.merge=True`` (our ``ROLLOUT_LORA_MERGE=1``) verl 0.9.1's FSDP engine sends the rollout engine
W + scale x BA every step (``FSDPEngine._merged_lora_per_tensor_param``): it copies the base weights to the CPU
(``verl.utils.fsdp_utils.backup_base_model_weights``: ``param.data.clone().cpu()`` per parameter, a fresh
pageable copy each step), merges the adapter into them, streams them and copies them back
(``restore_base_model_weights``). On an H100 with the 0.5B shape the two pageable copies were 0.84 s of the
1.23 s the actor spends on a sync; into pinned buffers they take 0.06 s, and the whole sync 0.175 s instead of
1.25 s (``bench/micro/lora_sync_bench.py``, docs/runs/2026-11-24-h100-resident/NOTES.md, section 0d).

Importing this module (verl imports ``actor_rollout_ref.model.external_lib`` in every worker; the train scripts
add it with ``LORA_MERGE_BACKUP=pinned``, the default) replaces those two functions: the backup goes into host
buffers allocated once per parameter and reused every step, page-locked when CUDA is available, so the copies
run at the link's speed. The values are the same (an exact copy of each rank's local shard, restored in
place); the merge, the merged tensors and the un-merged module afterwards are verl's own
(``tests/test_lora_backup.py`` compares them with verl's functions). The cost is host memory: one fp32 copy of
the rank's shard of the base weights stays allocated (pinned) for the life of the worker, where verl allocates
and frees a pageable copy every step.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from verl_ext.patches.lora_base_weights import base_weights, local_shard

_BUFFERS: "weakref.WeakKeyDictionary[torch.nn.Module, dict[str, torch.Tensor]]" = weakref.WeakKeyDictionary()
_VERL_FUNCTIONS: dict[str, Any] = {}


def _synchronize(tensors: list[torch.Tensor]) -> None:
    """Wait for the copies: the merge rewrites the parameters next, and training reads them after the restore."""
    if any(t.is_cuda for t in tensors):
        torch.cuda.current_stream().synchronize()


def backup_base_model_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copy the base weights into this module's host buffers (allocated on first use, reused after)."""
    buffers = _BUFFERS.setdefault(module, {})
    params = base_weights(module)
    pin = torch.cuda.is_available()
    with torch.no_grad():
        for name, local in params:
            buffer = buffers.get(name)
            if buffer is None or buffer.shape != local.shape or buffer.dtype != local.dtype:
                buffer = torch.empty(local.shape, dtype=local.dtype, device="cpu", pin_memory=pin)
                buffers[name] = buffer
            buffer.copy_(local, non_blocking=True)
    _synchronize([local for _, local in params])
    return {name: buffers[name] for name, _ in params}


def restore_base_model_weights(module: torch.nn.Module, backup: dict[str, torch.Tensor]) -> None:
    """Copy the backed-up base weights back into the module's parameters, in place."""
    restored = []
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name in backup:
                local = local_shard(param.data)
                local.copy_(backup[name], non_blocking=True)
                restored.append(local)
    _synchronize(restored)


def install() -> None:
    """Put this module's backup and restore where verl's merged sync looks them up (idempotent)."""
    from verl.utils import fsdp_utils

    for name, replacement in (("backup_base_model_weights", backup_base_model_weights),
                              ("restore_base_model_weights", restore_base_model_weights)):
        current = getattr(fsdp_utils, name)
        if current is not replacement:
            _VERL_FUNCTIONS.setdefault(name, current)
            setattr(fsdp_utils, name, replacement)


def uninstall() -> None:
    """Give verl its own functions back (tests)."""
    from verl.utils import fsdp_utils

    for name, original in _VERL_FUNCTIONS.items():
        setattr(fsdp_utils, name, original)


install()
