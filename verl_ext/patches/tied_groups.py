"""GRPO advantages of exactly 0 for a group whose rewards are all equal (``GRPO_TIED_GROUPS``, default ``zero``).

Why: verl 0.9.1's ``compute_grpo_outcome_advantage`` (verl/trainer/ppo/core_algos.py:268-331) takes a group's
float32 mean and std and returns ``(r - mean) / (std + 1e-6)``. When every reply of a group is paid the same
reward and float32 does not hold that reward's mean exactly (the engine reward ``0.1 + 0.9 x value`` almost never
is a short binary fraction), ``r - mean`` is a rounding residue of ~1e-8 and the std is of the same size, so every
reply of a group that carries no signal gets the same advantage of up to ~0.1: on 500 connect_four training
positions, 864 of the 1,447 distinct rewards give a tied group of 8 a nonzero advantage, median 0.056, largest
0.106, per reply (docs/runs/2026-11-27-cpu-advantage-pull/). Such a group pushes its one move up or down in a
direction set by rounding: for a connect_four policy that plays column 3 85 % of the time, 1.7 % of the advantage
mass (~4 % at the share of tied groups late in a 100-step run). Rewards that are short binary fractions (0, 0.5,
1) average exactly and never hit it. Upstream: verl PR 4598 (open), NeMo-RL PR 4161 (its leave-one-out variant).

``install()`` wraps verl's ``compute_grpo_outcome_advantage`` (the name ``ray_trainer.compute_advantage`` looks up
at each call, ray_trainer.py:235-242, which the v1 trainer's multi-trajectory path calls too) and
``compute_grpo_vectorized_outcome_advantage`` (and their entries in verl's estimator registry, ``grpo`` and
``grpo_vectorized``): verl's own function runs unchanged, then the rows of each group of two or more replies
whose summed rewards are all equal get advantage and return 0. Every other row keeps verl's numbers bit for bit,
and a group of one keeps verl's rule (mean 0, std 1). Loaded through ``VERL_USE_EXTERNAL_MODULES`` by the train
scripts unless ``GRPO_TIED_GROUPS=verl``.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

import numpy as np

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

CORE_ALGOS = "verl.trainer.ppo.core_algos"
# (the function's name in core_algos, its name in verl's ADV_ESTIMATOR_REGISTRY)
ESTIMATORS = (("compute_grpo_outcome_advantage", "grpo"),
              ("compute_grpo_vectorized_outcome_advantage", "grpo_vectorized"))
_WRAPPED = "_verl_ext_tied_groups"


def tied_rows(scores: Any, index: np.ndarray) -> np.ndarray:
    """A boolean per row: its group (rows of equal ``index``) has two or more rows and their ``scores`` (a tensor,
    one summed reward per row) are all equal."""
    values = scores.detach().cpu().double().numpy()
    _, group = np.unique(np.asarray(index).astype(str), return_inverse=True)
    group = group.reshape(-1)
    groups = int(group.max()) + 1 if group.size else 0
    size = np.bincount(group, minlength=groups)
    low = np.full(groups, np.inf)
    high = np.full(groups, -np.inf)
    np.minimum.at(low, group, values)
    np.maximum.at(high, group, values)
    return ((size >= 2) & (low == high))[group]


def zero_tied_groups(estimator: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
    """``estimator`` (verl's GRPO advantage function), with the advantages and returns of tied groups set to 0."""
    if getattr(estimator, _WRAPPED, False):
        return estimator

    @functools.wraps(estimator)
    def wrapped(token_level_rewards: Any, response_mask: Any, index: np.ndarray, *args: Any,
                **kwargs: Any) -> tuple[Any, Any]:
        import torch

        advantages, returns = estimator(token_level_rewards, response_mask, index, *args, **kwargs)
        tied = tied_rows(token_level_rewards.sum(dim=-1), index)
        if not tied.any():
            return advantages, returns
        rows = torch.as_tensor(tied, device=advantages.device).unsqueeze(-1)
        zeroed = advantages.masked_fill(rows, 0.0)
        if returns is advantages:  # verl returns one tensor as both
            return zeroed, zeroed
        return zeroed, None if returns is None else returns.masked_fill(rows, 0.0)

    setattr(wrapped, _WRAPPED, True)
    return wrapped


def _patch_core_algos(core_algos: ModuleType) -> None:
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for function_name, registry_name in ESTIMATORS:
        original = getattr(core_algos, function_name)
        patched = zero_tied_groups(original)
        setattr(core_algos, function_name, patched)
        if registry.get(registry_name) is original:
            registry[registry_name] = patched


def install() -> None:
    """Wrap verl's GRPO advantage functions once ``verl.trainer.ppo.core_algos`` is imported (idempotent)."""
    after_import(CORE_ALGOS, _patch_core_algos)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
