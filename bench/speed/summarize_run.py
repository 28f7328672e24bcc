"""Summarise verl runs into the evidence JSON: verl's per-step metrics plus our per-sample reward log.

    python bench/speed/summarize_run.py RUN.metrics.jsonl [RESUME.metrics.jsonl ...] --out summary.json

Each ``*.metrics.jsonl`` is verl's file logger output (the train scripts write
``$LOG_DIR/<experiment>-<time>.metrics.jsonl``); its sibling ``*.samples.jsonl`` (same name with "metrics"
replaced by "samples") is our per-sample log (``VERL_EXT_SAMPLE_LOG``, see ``verl_ext/sample_log.py``).
verl 0.9.1 keeps custom reward fields out of its training metrics, so the legal-move rate, format rate and
our own time come from that log: a run's training samples, in time order, are cut into steps of
``--samples-per-step`` (default: samples // logged steps; GRPO scores exactly TRAIN_BATCH_SIZE x ROLLOUT_N
per step) and matched to the run's logged steps in order.

Per step this keeps the reward mean, legal/format rates, for full-game samples (TASK_MODE=game, docs/games.md)
the win/draw/loss/forfeit/truncated rates and mean model turns/tokens/game length over the step's games, verl's
timings (generation, old/ref log-probs,
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

from verl_ext import runlog
from verl_ext.runlog import Steps

KEEP_PREFIXES = ("timing_s/", "perf/", "critic/score/mean", "response_length/mean", "response_length/clip_ratio",
                 "prompt_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/lr",
                 "actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb")


def read_run(metrics_path: Path, per_step: int | None = None) -> tuple[Steps, Steps]:
    """One run: the kept verl metrics and the per-step sample statistics (``verl_ext.runlog``)."""
    return runlog.read_run(metrics_path, per_step, KEEP_PREFIXES)


def summarise(metrics: Steps, samples: Steps) -> dict[str, Any]:
    rows = []
    for step in sorted(set(metrics) | set(samples)):
        verl, ours = metrics.get(step, {}), samples.get(step, {})
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
    parser.add_argument("metrics", nargs="+", type=Path, help="verl file-logger JSONL of each run (in order)")
    parser.add_argument("--samples-per-step", type=int, help="TRAIN_BATCH_SIZE x ROLLOUT_N (default: inferred)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.metrics if not p.is_file()]
    if missing:
        parser.error(f"metrics file(s) not found: {', '.join(missing)}")
    metrics, samples = runlog.read_runs(args.metrics, args.samples_per_step, KEEP_PREFIXES)
    summary = summarise(metrics, samples)
    args.out.write_text(json.dumps(summary, indent=2, sort_keys=True))
    print(f"{summary['num_steps']} steps -> {args.out}; median step {summary['median_step_s_after_first']} s "
          f"after the first; our share of step: max {summary['max_our_share_of_step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
