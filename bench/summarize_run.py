"""Summarise a verl run into the evidence JSON: verl's per-step metrics plus our per-sample reward fields.

    python bench/summarize_run.py METRICS.jsonl [MORE.jsonl ...] --rollouts DIR --out summary.json

``METRICS.jsonl``: verl's file logger (``trainer.logger=[console,file]``, path from ``VERL_FILE_LOGGER_PATH``).
``--rollouts``: verl's per-step sample dumps (``trainer.rollout_data_dir``; the train scripts set it to
``$LOG_DIR/rollouts/$EXPERIMENT_NAME``). verl 0.9.1 does not put custom reward fields into the training
metrics, but it writes them into these dumps, one JSON line per sample: ``valid`` (legal move),
``format_ok``, ``failed``, ``reward_ms`` and ``dataset_ms`` (our time per sample).

Per step this keeps the reward mean, legal/format rates, verl's timings (generation, old/ref log-probs,
update, weight sync), generated tokens/s and GPU memory, and our share of the step:
(sum of reward_ms + dataset_ms over the step's samples) / step time. That is an upper bound: verl's reward
workers score while other samples are still generating, and the dataloader builds samples ahead.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

KEEP_PREFIXES = ("timing_s/", "perf/", "critic/score/mean", "response_length/mean", "response_length/clip_ratio",
                 "prompt_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/lr",
                 "actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb")
RATES = {"valid": "legal_rate", "format_ok": "format_rate", "failed": "reward_failures"}


def read_metrics(paths: list[Path]) -> dict[int, dict[str, float]]:
    """verl file-logger JSONL -> {step: kept metrics}; a later file wins for a repeated step (resume)."""
    steps: dict[int, dict[str, float]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            record = entry.get("data", entry)
            step = int(entry.get("step", record.get("training/global_step", 0)))
            steps[step] = {k: float(v) for k, v in record.items()
                           if k.startswith(KEEP_PREFIXES) and isinstance(v, (int, float))}
    return steps


def read_rollouts(folder: Path | None) -> dict[int, dict[str, float]]:
    """verl rollout dumps (``<step>.jsonl``) -> per-step means/sums of our per-sample fields."""
    if folder is None or not folder.is_dir():
        return {}
    steps: dict[int, dict[str, float]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        if not path.stem.isdigit():
            continue
        samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not samples:
            continue
        row: dict[str, float] = {"samples": float(len(samples)),
                                 "reward_mean": statistics.fmean(float(s.get("score", 0.0)) for s in samples)}
        for key, label in RATES.items():
            if key in samples[0]:
                row[label] = statistics.fmean(float(s[key]) for s in samples)
        for key in ("reward_ms", "dataset_ms"):
            if key in samples[0]:
                values = [float(s[key]) for s in samples]
                row[f"{key}_sum"] = sum(values)
                row[f"{key}_p99"] = sorted(values)[min(len(values) - 1, int(0.99 * len(values)))]
        steps[int(path.stem)] = row
    return steps


def summarise(metrics: dict[int, dict[str, float]], rollouts: dict[int, dict[str, float]]) -> dict[str, Any]:
    rows = []
    for step in sorted(set(metrics) | set(rollouts)):
        verl, ours = metrics.get(step, {}), rollouts.get(step, {})
        row: dict[str, Any] = {"step": step, **verl, **{f"verl_ext/{k}": v for k, v in ours.items()}}
        step_s = verl.get("timing_s/step")
        if step_s and "reward_ms_sum" in ours:
            our_s = (ours["reward_ms_sum"] + ours.get("dataset_ms_sum", 0.0)) / 1000.0
            row["verl_ext/our_share_of_step"] = our_s / step_s
        tokens = verl.get("response_length/mean", 0.0) * ours.get("samples", 0.0)
        if step_s and tokens:
            row["generated_tokens_per_s_of_step"] = tokens / step_s
            if verl.get("timing_s/gen"):
                row["generated_tokens_per_s_of_gen"] = tokens / verl["timing_s/gen"]
        rows.append(row)
    shares = [r["verl_ext/our_share_of_step"] for r in rows if "verl_ext/our_share_of_step" in r]
    # step 1 includes one-off warm-up (CUDA graph capture, allocator growth); report steady state separately
    steady = [r["timing_s/step"] for r in rows[1:] if "timing_s/step" in r]
    return {
        "steps": rows,
        "num_steps": len(rows),
        "max_our_share_of_step": max(shares) if shares else None,
        "mean_our_share_of_step": statistics.fmean(shares) if shares else None,
        "median_step_s_after_first": statistics.median(steady) if steady else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", type=Path, help="verl file-logger JSONL file(s)")
    parser.add_argument("--rollouts", type=Path, help="trainer.rollout_data_dir of the run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.metrics if not p.is_file()]
    if missing:
        parser.error(f"metrics file(s) not found: {', '.join(missing)}")
    summary = summarise(read_metrics(args.metrics), read_rollouts(args.rollouts))
    args.out.write_text(json.dumps(summary, indent=2, sort_keys=True))
    print(f"{summary['num_steps']} steps -> {args.out}; median step {summary['median_step_s_after_first']} s "
          f"after the first; our share of step: max {summary['max_our_share_of_step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
