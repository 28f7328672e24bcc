"""Summarise a verl run's per-step metrics (``trainer.logger=[console,file]`` JSONL) into the evidence JSON.

    python bench/summarize_run.py METRICS.jsonl [MORE.jsonl ...] --samples-per-step 64 --out summary.json

Keeps, per step: reward/score means, our per-sample metrics (valid = legal-move rate, format_ok, failed,
reward_ms), verl's timings, throughput and GPU memory; and estimates the share of step time spent in
our reward code (mean reward_ms x samples per step / step time; an upper bound, since verl's reward
workers score in parallel).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KEEP_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/", "critic/score/", "critic/rewards/",
                 "response_length/mean", "prompt_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy",
                 "actor/lr")
OUR_METRICS = ("score", "valid", "format_ok", "task_score", "failed", "reward_ms")


def _our_keys(record: dict) -> dict[str, float]:
    """verl logs our compute_score dict keys under some prefix; find them by their last path parts."""
    found = {}
    for key, value in record.items():
        parts = key.split("/")
        for metric in OUR_METRICS:
            if metric in parts and isinstance(value, (int, float)) and ("mean" in parts or parts[-1] == metric):
                found.setdefault(metric, float(value))
    return found


def summarise(paths: list[Path], samples_per_step: int) -> dict:
    steps = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            record = entry.get("data", entry)
            step = entry.get("step", record.get("training/global_step"))
            kept = {k: v for k, v in record.items() if k.startswith(KEEP_PREFIXES) and isinstance(v, (int, float))}
            ours = _our_keys(record)
            row = {"step": step, **kept, **{f"verl_ext/{k}": v for k, v in ours.items()}}
            step_time = record.get("timing_s/step")
            if "reward_ms" in ours and step_time:
                row["verl_ext/reward_share_of_step"] = ours["reward_ms"] * samples_per_step / 1000.0 / step_time
            steps.append(row)
    shares = [s["verl_ext/reward_share_of_step"] for s in steps if "verl_ext/reward_share_of_step" in s]
    return {
        "steps": steps,
        "num_steps": len(steps),
        "max_reward_share_of_step": max(shares) if shares else None,
        "samples_per_step": samples_per_step,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", type=Path)
    parser.add_argument("--samples-per-step", type=int, required=True, help="TRAIN_BATCH_SIZE x ROLLOUT_N")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    summary = summarise(args.metrics, args.samples_per_step)
    args.out.write_text(json.dumps(summary, indent=2, sort_keys=True))
    print(f"{summary['num_steps']} steps -> {args.out}; max reward share of step: "
          f"{summary['max_reward_share_of_step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
