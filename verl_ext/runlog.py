"""Read what a training run writes: verl's per-step metrics and our per-sample reward log.

Each ``*.metrics.jsonl`` is verl's file logger output (the train scripts write
``$LOG_DIR/<experiment>-<time>.metrics.jsonl``; a console ``.log`` with ``step:N - key:value`` lines works
too); its sibling ``*.samples.jsonl`` (same name with "metrics" replaced by "samples") is our per-sample log
(``VERL_EXT_SAMPLE_LOG``, see ``sample_log.py``; ``.samples.jsonl.gz`` is read too). verl 0.9.1 keeps custom reward fields out of its training
metrics, so the legal-move rate, format rate and task score per step come from that log: a run's training
samples, in time order, are cut into steps of ``per_step`` (default: samples // logged steps; GRPO scores exactly
TRAIN_BATCH_SIZE x ROLLOUT_N per step) and matched to the run's logged steps in order.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

Steps = dict[int, dict[str, float]]
# per-sample field -> per-step rate name
RATES = {"valid": "legal_rate", "format_ok": "format_rate", "failed": "reward_failures"}
# per-game metrics (verl_ext.games.scoring), averaged over the step's full-game samples only
GAME_MEANS = ("win", "draw", "loss", "forfeit", "truncated", "model_turns", "model_tokens", "game_moves",
              "rejected_replies")
_CONSOLE_STEP = re.compile(r"\bstep:(\d+) - (.*)$")


def _keep(key: str, prefixes: tuple[str, ...] | None) -> bool:
    return prefixes is None or key.startswith(prefixes)


def read_console_log(path: Path, prefixes: tuple[str, ...] | None = None) -> Steps:
    """verl's console logger lines (``step:N - key:value - key:value ...``) -> {step: metrics}."""
    steps: Steps = {}
    for line in path.read_text(errors="replace").splitlines():
        match = _CONSOLE_STEP.search(line)
        if not match:
            continue
        record = {}
        for part in match.group(2).split(" - "):
            key, _, value = part.strip().rpartition(":")
            try:
                record[key] = float(value)
            except ValueError:
                continue
        step = int(match.group(1))
        steps[step] = {**steps.get(step, {}), **{k: v for k, v in record.items() if _keep(k, prefixes)}}
    return steps


def read_metrics(path: Path, prefixes: tuple[str, ...] | None = None) -> Steps:
    """verl file-logger JSONL (or a console ``.log``) -> {step: numeric metrics whose names start with
    ``prefixes`` (all if None)}. Records of the same step are merged (verl's SFT trainer logs train and val
    metrics of one step separately); a later value of a key wins."""
    if path.suffix == ".log":
        return read_console_log(path, prefixes)
    steps: Steps = {}
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the last line of a run that was killed mid-write
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        record = entry.get("data", entry)
        step = int(entry.get("step", record.get("training/global_step", 0)))
        kept = {k: float(v) for k, v in record.items()
                if _keep(k, prefixes) and isinstance(v, (int, float)) and not isinstance(v, bool)}
        steps[step] = {**steps.get(step, {}), **kept}
    return steps


def samples_path(metrics: Path) -> Path | None:
    """The sample log beside a metrics file: run.metrics.jsonl (or run.log) -> run.samples.jsonl."""
    if metrics.suffix == ".log":
        return metrics.with_suffix(".samples.jsonl")
    if "metrics" in metrics.name:
        return metrics.with_name(metrics.name.replace("metrics", "samples"))
    return None


def read_samples(path: Path | None, steps: list[int], per_step: int | None) -> Steps:
    """Our per-sample log -> per-step reward mean, rates, task score, game outcome rates (over the step's
    full-game samples) and time sums, matched to ``steps``."""
    if path is not None and not path.is_file() and path.with_name(path.name + ".gz").is_file():
        path = path.with_name(path.name + ".gz")  # a sample log kept compressed (e.g. committed evidence)
    if path is None or not path.is_file() or not steps:
        return {}
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    samples = []
    for line in text.splitlines():
        try:
            samples.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a killed run
    samples = sorted((s for s in samples if s.get("split", "train") == "train"), key=lambda s: s.get("time", 0.0))
    per_step = per_step or len(samples) // len(steps)
    if per_step <= 0:
        return {}
    out: Steps = {}
    for index, step in enumerate(steps):
        chunk = samples[index * per_step:(index + 1) * per_step]
        if len(chunk) < per_step:
            break
        row: dict[str, float] = {"samples": float(len(chunk)),
                                 "reward_mean": statistics.fmean(float(s["score"]) for s in chunk),
                                 "task_score": statistics.fmean(float(s.get("task_score", 0.0)) for s in chunk)}
        for key, label in RATES.items():
            row[label] = statistics.fmean(float(s.get(key, 0.0)) for s in chunk)
        games = [s for s in chunk if float(s.get("game", 0.0)) == 1.0]
        if games:
            row["games"] = float(len(games))
            row["game_reward_mean"] = statistics.fmean(float(s["score"]) for s in games)
            for key in GAME_MEANS:
                label = key if key.startswith("game_") else f"game_{key}"
                row[label] = statistics.fmean(float(s.get(key, 0.0)) for s in games)
        for key in ("reward_ms", "dataset_ms"):
            values = sorted(float(s.get(key, 0.0)) for s in chunk)
            row[f"{key}_sum"] = sum(values)
            row[f"{key}_p99"] = values[min(len(values) - 1, int(0.99 * len(values)))]
        out[step] = row
    return out


def read_run(metrics_path: Path, per_step: int | None = None,
             prefixes: tuple[str, ...] | None = None) -> tuple[Steps, Steps]:
    """One run: its verl metrics and its per-step sample statistics."""
    metrics = read_metrics(metrics_path, prefixes)
    # step 0 holds only the validation before training (trainer.val_before_train): no training samples
    return metrics, read_samples(samples_path(metrics_path), sorted(s for s in metrics if s > 0), per_step)


def read_runs(paths: Iterable[Path], per_step: int | None = None,
              prefixes: tuple[str, ...] | None = None) -> tuple[Steps, Steps]:
    """Several runs in order (a resumed run's steps follow, or replace, the earlier run's)."""
    metrics: Steps = {}
    samples: Steps = {}
    for path in paths:
        run_metrics, run_samples = read_run(path, per_step, prefixes)
        metrics.update(run_metrics)
        samples.update(run_samples)
    return metrics, samples
