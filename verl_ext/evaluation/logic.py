"""Held-out reasoning-gym puzzles of the ``logic`` env: accuracy per dataset.

An answer counts as correct when the logic adapter's ``score`` marks it valid: with the default
``partial_credit: false`` that is exactly the dataset's own ``score_answer == 1``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..mixture import EnvMixture
from .policies import Policy
from .single_move import SAMPLES_PER_CASE, ask, heldout_tasks, sample
from .stats import mean_or_none, proportion


def evaluate_logic(policy: Policy, mixture: EnvMixture, seed: int, confidence: float,
                   progress: bool) -> dict[str, Any]:
    """Per-dataset and pooled accuracy, format rate and mean reward of ``policy``."""
    adapter = mixture.adapters["logic"]
    tasks = heldout_tasks(mixture, "logic")
    replies = ask(policy, tasks, "logic", seed, progress)
    counts: dict[str, dict[str, Any]] = {}
    for case in [*adapter.cases(), None]:  # None: all datasets pooled
        counts[case] = {"n": 0, "format_ok": 0, "correct": 0, "rewards": [], "reasons": Counter(), "samples": []}
    for task, reply in zip(tasks, replies):
        result = adapter.score(task.case, task.state, reply)
        for key in (task.case, None):
            c = counts[key]
            c["n"] += 1
            c["format_ok"] += int(result.format_ok)
            c["correct"] += int(result.valid)
            c["rewards"].append(result.score)
            c["reasons"][result.reason] += 1
        if len(counts[task.case]["samples"]) < SAMPLES_PER_CASE:
            counts[task.case]["samples"].append(sample(task, reply, result.parsed, result.reason))

    def summary(c: dict[str, Any], with_samples: bool) -> dict[str, Any]:
        out = {"n": c["n"], "accuracy": proportion(c["correct"], c["n"], confidence),
               "format": proportion(c["format_ok"], c["n"], confidence), "reward": mean_or_none(c["rewards"]),
               "reasons": dict(sorted(c["reasons"].items()))}
        if with_samples:
            out["samples"] = c["samples"]
        return out

    return {
        "partial_credit": bool(adapter.config.partial_credit),  # type: ignore[attr-defined]
        "cases": {case: summary(c, True) for case, c in counts.items() if case is not None},
        "overall": summary(counts[None], False),
    }
