"""Proportions with Wilson score intervals; means with normal intervals."""

from __future__ import annotations

import math
from statistics import NormalDist


def z_value(confidence: float) -> float:
    """Two-sided normal quantile: 0.95 -> 1.95996..."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``trials``; ``(0.0, 1.0)`` when there are no trials."""
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return 0.0, 1.0
    z = z_value(confidence)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    low = 0.0 if successes == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if successes == trials else min(1.0, max(p, centre + half))
    return low, high


def proportion(successes: int, trials: int, confidence: float = 0.95) -> dict[str, float | int | None]:
    """``{"k", "n", "rate", "ci_low", "ci_high"}``; ``rate`` is None when ``trials`` is 0."""
    low, high = wilson_interval(successes, trials, confidence)
    return {"k": successes, "n": trials, "rate": successes / trials if trials else None,
            "ci_low": low, "ci_high": high}


def mean_or_none(values: list[float]) -> float | None:
    """Arithmetic mean, or None for an empty list (JSON ``null``, shown as '-')."""
    return sum(values) / len(values) if values else None


def mean_interval(values: list[float], confidence: float = 0.95) -> dict[str, float | int | None]:
    """``{"n", "mean", "sd", "ci_low", "ci_high"}``: the mean with its normal-approximation interval
    ``mean +- z * sd / sqrt(n)`` (``sd`` the sample standard deviation); the interval is None below 2 values."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci_low": None, "ci_high": None}
    mean = math.fsum(values) / n
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "ci_low": None, "ci_high": None}
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = z_value(confidence) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half}
