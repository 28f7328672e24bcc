"""Paired comparison of models on the same held-out positions: each model's engine score minus the baseline's,
position by position.

Every model of one eval answers the same positions in the same order, so the change a training step made is best
measured per position: the mean of the differences has a far tighter interval than the two models' own means
(their position-to-position spread cancels). A gain whose paired interval lies above 0 is a gain on these
positions, even where the two models' own intervals overlap.
"""

from __future__ import annotations

from typing import Any

from ..envs.config import ConfigError
from .stats import mean_interval

DEFAULT_BASELINE = "sft"  # the recipe's cold start: what GRPO is measured against


def choose_baseline(names: list[str], requested: str | None) -> str:
    """The model the others are paired with: ``requested`` (which must be one of ``names``), else ``sft`` when
    evaluated, else the first model."""
    if requested:
        if requested not in names:
            raise ConfigError(f"--paired-baseline: {requested!r} is not one of the --models ({', '.join(names)})")
        return requested
    return DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[0]


def paired_summary(mine: list[float], theirs: list[float], confidence: float = 0.95) -> dict[str, Any]:
    """``{"positions", "change", "better", "worse"}`` of two equally long score lists of the same positions:
    the mean of ``mine - theirs`` with its normal interval, and how many positions rose or fell."""
    diffs = [float(a) - float(b) for a, b in zip(mine, theirs, strict=True)]
    return {"positions": len(diffs), "change": mean_interval(diffs, confidence),
            "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs)}


def paired_changes(models: dict[str, dict[str, Any]], baseline: str, confidence: float) -> dict[str, Any]:
    """``{model: {case: {"positions", "change", "better", "worse"}}}`` for every model evaluated on single moves
    beside ``baseline``; ``change`` is the mean paired difference of the engine score with its normal interval."""
    base = (models.get(baseline) or {}).get("single_move")
    if not base:
        return {}
    out: dict[str, Any] = {}
    for name, model in models.items():
        single = model.get("single_move")
        if name == baseline or not single:
            continue
        cases = {}
        for case, result in single["cases"].items():
            mine = result.get("engine_by_position")
            theirs = (base["cases"].get(case) or {}).get("engine_by_position")
            if not mine or not theirs or len(mine) != len(theirs):
                continue
            cases[case] = paired_summary(mine, theirs, confidence)
        if cases:
            out[name] = cases
    return out
