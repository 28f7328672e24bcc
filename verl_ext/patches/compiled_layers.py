"""torch.compile for the decoder layers of verl's FSDP2 actor: fewer CPU-side ops per layer.

At the smoke load (64 samples of ~205 tokens, one 13k-token micro batch, Qwen2.5-0.5B shape) verl's update is bound
by the CPU issuing work, not by the GPU: a profile of one update had the GPU busy 16 % of the span, with ~9,000
kernel launches (docs/runs/2026-11-25-h100-smoke-profile/NOTES.md, section 0e). Each decoder layer under LoRA is ~50 small ops in the forward (norms,
seven projections each with its adapter, rotary, residuals, the MLP), run again by activation checkpointing and
then in the backward, each op a Python call into PyTorch.

``compile_decoder_layers(module)`` compiles each decoder layer's ``forward`` with ``torch.compile`` (dynamic shapes:
a packed micro batch's token count changes every step). Only the layer's body is compiled: FSDP2's hooks,
activation checkpointing (Hugging Face's, around the layer's call) and verl's code around the model stay eager, and
``verl_ext.patches.attention``'s packed attention runs eagerly inside the layer (its boundaries are read from the device).
Every layer has the same code, so the graphs are compiled once, on the first micro batch, and reused by all layers
and later shapes. The first update pays for the compilation (tens of seconds; PyTorch's on-disk cache makes a
later run on the same machine quicker).

``install()`` wraps verl 0.9.1's ``FSDPEngine._build_fsdp_module`` so that every FSDP2 engine (the actor, and a
separate reference model) compiles its layers once FSDP2 has wrapped them, and so does the plain module of
``ACTOR_FSDP=off`` (``verl_ext.patches.unsharded_actor``, which the train scripts load first, so that this wrap is outside).
Loaded as ``verl_ext.patches.compiled_layers`` through ``VERL_USE_EXTERNAL_MODULES`` (``ACTOR_COMPILE=layers``).
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType
from typing import Any

import torch

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
_PATCHED = "_verl_ext_compiled_layers"
_COMPILED = "_verl_ext_compiled_forward"
# torch.compile's backend in the workers: inductor (the default) generates fused kernels; aot_eager runs the same
# captured graphs op by op (to tell a capture problem from a code-generation one)
BACKEND_ENV = "VERL_EXT_COMPILE_BACKEND"

logger = logging.getLogger(__name__)


def layer_class_names(module: torch.nn.Module, configured: Any = None) -> list[str]:
    """The decoder-layer class names FSDP2 wraps one by one: verl's ``wrap_policy.transformer_layer_cls_to_wrap``
    when set, else the model's ``_no_split_modules`` (verl's default, read through PEFT's wrappers)."""
    if configured:
        return [configured] if isinstance(configured, str) else list(configured)
    return list(getattr(module, "_no_split_modules", None) or [])


def decoder_layers(module: torch.nn.Module, class_names: list[str]) -> list[torch.nn.Module]:
    """The submodules whose class (or a base class: FSDP2 subclasses each wrapped module) is named in
    ``class_names``."""
    names = set(class_names)
    return [m for m in module.modules() if any(cls.__name__ in names for cls in type(m).__mro__)]


def compile_decoder_layers(module: torch.nn.Module, class_names: list[str] | None = None,
                           backend: str | None = None) -> int:
    """Compile the ``forward`` of every decoder layer in ``module`` (idempotent); returns how many layers.
    ``backend`` defaults to ``$VERL_EXT_COMPILE_BACKEND``, else inductor.

    Raises ``ValueError`` naming the classes looked for when there is no such layer: compiling nothing would
    silently leave the switch without effect.
    """
    class_names = class_names if class_names is not None else layer_class_names(module)
    backend = backend or os.environ.get(BACKEND_ENV) or "inductor"
    layers = decoder_layers(module, class_names)
    if not layers:
        raise ValueError(f"ACTOR_COMPILE=layers: no decoder layer in {type(module).__name__} (looked for the classes "
                         f"{class_names or 'of _no_split_modules, which is empty'}); set "
                         "actor_rollout_ref.actor.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap or use "
                         "ACTOR_COMPILE=off")
    for layer in layers:
        if getattr(layer, _COMPILED, False):
            continue
        # an instance attribute: nn.Module's call (and with it FSDP2's hooks and the checkpointing around it) stays
        # eager and calls the compiled body
        layer.forward = torch.compile(layer.forward, dynamic=True, backend=backend)
        setattr(layer, _COMPILED, True)
    return len(layers)


def patch_engine(transformer_impl: ModuleType) -> None:
    """Make verl's ``FSDPEngine._build_fsdp_module`` compile the decoder layers of the FSDP2 module it builds."""
    engine_class = transformer_impl.FSDPEngine
    if getattr(engine_class, _PATCHED, False):
        return
    verl_build = engine_class._build_fsdp_module
    fsdp_version = transformer_impl.fsdp_version

    @functools.wraps(verl_build)
    def _build_fsdp_module(self: Any, module: torch.nn.Module) -> torch.nn.Module:
        module = verl_build(self, module)
        if fsdp_version(module) == 1:  # 2: FSDP2's units; 0: the plain module of ACTOR_FSDP=off
            raise ValueError(f"ACTOR_COMPILE=layers compiles FSDP2's decoder layers; this engine uses FSDP "
                             f"version 1 (strategy {self.engine_config.strategy!r}): use FSDP_STRATEGY=fsdp2 or "
                             "ACTOR_COMPILE=off")
        wrap_policy = getattr(self.engine_config, "wrap_policy", None) or {}
        configured = wrap_policy.get("transformer_layer_cls_to_wrap") if hasattr(wrap_policy, "get") else None
        count = compile_decoder_layers(module, layer_class_names(module, configured))
        logger.warning("verl_ext.patches.compiled_layers: %d decoder layers compiled with torch.compile (dynamic shapes); "
                       "the first micro batch compiles them", count)
        return module

    engine_class._build_fsdp_module = _build_fsdp_module
    setattr(engine_class, _PATCHED, True)


def install() -> None:
    """Patch verl's FSDP engine now if imported, else as soon as it is."""
    after_import(ENGINE_MODULE, patch_engine)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
