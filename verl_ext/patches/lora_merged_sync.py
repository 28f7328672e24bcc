"""The merged LoRA weight sync without writing the trained module: each merged weight is computed out of place
(``LORA_MERGE_SYNC=out_of_place``).

With ``model.lora.merge=True`` (our ``ROLLOUT_LORA_MERGE=1``) verl 0.9.1's FSDP engine sends the rollout engine
W + scale x BA every step by merging in place (``FSDPEngine._merged_lora_per_tensor_param`` in
``merged_lora_context``): it copies the base weights to the host, merges PEFT's adapters into the module's
parameters, gathers every tensor for the send, then copies the base weights back and clears PEFT's merge records.
Per step that is a host round trip of the fp32 base weights (0.06 s with our pinned buffers, 0.84 s with verl's
pageable copies, 0.5B shape on an H100: ``verl_ext/patches/lora_backup.py``), in-place writes to the weights being trained,
and, with the pinned backup, a host copy of the base weights held for the whole run.

This module yields, for each LoRA target, its gathered base weight plus PEFT's own ``get_delta_weight`` of each
active adapter (the same fp32 tensors and the same additions as PEFT's ``merge``, so the values are bitwise
verl's), and every other tensor as verl sends it, under verl's names and in verl's order
(``normalize_peft_param_name``, ``convert_weight_keys``). The module is only read. What it does not cover goes to
verl's own path, with the reason printed once: FSDP1, FSDP2's CPU offload policy, LoRA variants (DoRA, ...) and
``lora_bias``. A plain module (``ACTOR_FSDP=off``: bf16 base weights, fp32 adapter) gets each merged weight computed in
fp32 and rounded to bf16 once, which is FSDP2's result whenever the base weights are bf16 numbers (a bf16 checkpoint).

Import it in verl's workers through ``actor_rollout_ref.model.external_lib`` (the train scripts do unless
``LORA_MERGE_SYNC=in_place``; the default since docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q: on an H100 the actor's side of the sync took 0.082 s
against 0.143 s with the pinned backup).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from verl_ext.patches.import_hook import after_import

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
MARK = "[verl-ext] lora merged sync"
_VERL_METHOD: dict[str, Any] = {}
_REPORTED: set[str] = set()


def lora_layers(module: torch.nn.Module) -> dict[str, Any]:
    """The state-dict key of each LoRA layer's base weight -> that PEFT layer."""
    from peft.tuners.lora import LoraLayer

    return {f"{name}.base_layer.weight": layer for name, layer in module.named_modules()
            if isinstance(layer, LoraLayer)}


def unsupported(module: torch.nn.Module) -> str | None:
    """Why this module's sync must stay verl's (None: it can be computed out of place)."""
    from verl.utils.fsdp_utils import fsdp_version

    if fsdp_version(module) == 1:  # 2: FSDP2; 0: the plain module of ACTOR_FSDP=off (verl_ext/patches/unsharded_actor.py)
        return "the module is wrapped with FSDP1"
    for key, layer in lora_layers(module).items():
        for adapter in layer.active_adapters:
            if adapter in getattr(layer, "lora_variant", {}):
                return f"{key}: adapter {adapter!r} is a LoRA variant (DoRA, ...), which PEFT merges its own way"
            if getattr(layer, "lora_bias", {}).get(adapter):
                return f"{key}: adapter {adapter!r} has lora_bias"
    return None


def _gathered(tensor: torch.Tensor, device: Any) -> torch.Tensor:
    return tensor.to(device, non_blocking=True).full_tensor() if isinstance(tensor, DTensor) else tensor


def merged_tensors(module: torch.nn.Module, device: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """What verl's merged sync sends, computed without writing ``module``: (Hugging Face name, tensor) pairs."""
    from verl.utils.fsdp_utils import normalize_peft_param_name
    from verl.utils.model import convert_weight_keys

    state = module.state_dict()
    # verl's renaming only touches keys, so running it on {key: key} maps each sent name to its state-dict key
    names = convert_weight_keys(normalize_peft_param_name({key: key for key in state}),
                                getattr(module, "_fsdp_wrapped_module", module))
    layers = lora_layers(module)
    with torch.no_grad():
        for name, key in names.items():
            tensor = state[key]
            layer = layers.get(key)
            if layer is None:
                yield name, (_gathered(tensor, device).to(torch.bfloat16, non_blocking=True)
                             if isinstance(tensor, DTensor) else tensor.detach().clone())
                continue
            merged = _gathered(tensor, device)
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A and adapter not in layer.merged_adapters:
                    merged = merged + _gathered(layer.get_delta_weight(adapter), device)  # PEFT's merge: W += delta
            if isinstance(tensor, DTensor):
                yield name, merged.to(torch.bfloat16, non_blocking=True)
            elif merged is tensor:  # no adapter added: the parameter itself, copied as verl does
                yield name, tensor.detach().clone()
            else:  # in the base weight's dtype, as PEFT's merge writes it (bf16 for ACTOR_FSDP=off's frozen weights)
                yield name, merged.to(tensor.dtype)


def _report(reason: str) -> None:
    if reason not in _REPORTED:
        _REPORTED.add(reason)
        print(f"{MARK}: verl's in-place merge for this sync: {reason}", file=sys.stderr, flush=True)


def _merged_lora_per_tensor_param(self: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``FSDPEngine._merged_lora_per_tensor_param``, out of place where ``unsupported`` allows it."""
    engine = sys.modules[ENGINE_MODULE]
    reason = unsupported(self.module)
    if reason is None and getattr(self, "_uses_fsdp2_cpu_offload_policy", False):
        reason = "FSDP2's CPU offload policy holds the parameters"
    if reason is not None:
        _report(reason)
        yield from _VERL_METHOD["method"](self)
        return
    try:
        yield from merged_tensors(self.module, engine.get_device_id())
    finally:
        if getattr(self, "_is_offload_param", False):  # as verl's method ends
            engine.offload_fsdp_model_to_cpu(self.module)


def _patch(module: ModuleType) -> None:
    engine_class = module.FSDPEngine
    current = engine_class.__dict__["_merged_lora_per_tensor_param"]
    if current is not _merged_lora_per_tensor_param:
        _VERL_METHOD.setdefault("method", current)
        engine_class._merged_lora_per_tensor_param = _merged_lora_per_tensor_param


def install() -> None:
    """Replace verl's merged sync in this process once verl's FSDP engine is imported (idempotent)."""
    after_import(ENGINE_MODULE, _patch)


def uninstall() -> None:
    """Give verl its own method back (tests)."""
    engine = sys.modules.get(ENGINE_MODULE)
    if engine is not None and "method" in _VERL_METHOD:
        engine.FSDPEngine._merged_lora_per_tensor_param = _VERL_METHOD["method"]


install()
