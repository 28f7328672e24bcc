"""Side-by-side table of one training-speed load: ours (bench/summarize_run.py JSON) vs TRL (bench/trl_grpo.py).

    python bench/compare_speed.py --ours ours.json --trl trl.json --load "16 x 4 x 64" --out compare.md

Every number is the median over steps 2..N (step 1 carries one-off warm-up such as CUDA graph capture).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Callable

Row = dict[str, Any]


def _median(steps: list[Row], pick: Callable[[Row], float | None]) -> float | None:
    values = [v for v in (pick(s) for s in steps[1:] or steps) if v is not None]
    return statistics.median(values) if values else None


def _sum(row: Row, *keys: str) -> float | None:
    values = [row[k] for k in keys if k in row]
    return sum(values) if values else None


def ours_columns(steps: list[Row]) -> dict[str, float | None]:
    return {
        "step s": _median(steps, lambda r: r.get("timing_s/step")),
        "generation s": _median(steps, lambda r: r.get("timing_s/gen")),
        "reward s (ours, serial sum)": _median(steps, lambda r: (r["verl_ext/reward_ms_sum"] / 1000.0
                                                                 if "verl_ext/reward_ms_sum" in r else None)),
        "log-prob passes s": _median(steps, lambda r: _sum(r, "timing_s/old_log_prob", "timing_s/ref") or 0.0),
        "update s": _median(steps, lambda r: r.get("timing_s/update_actor")),
        "weight sync s": _median(steps, lambda r: r.get("timing_s/update_weights")),
        "generated tokens/s (step)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_step")),
        "reward mean": _median(steps, lambda r: r.get("verl_ext/reward_mean")),
        "GPU memory GB": _median(steps, lambda r: r.get("actor/perf/max_memory_reserved_gb")),
    }


def trl_columns(steps: list[Row]) -> dict[str, float | None]:
    def update(row: Row) -> float | None:
        prepare = row.get("trl_timer_s/_prepare_inputs")
        return row["timing_s/step"] - prepare if prepare is not None else None

    def logprobs(row: Row) -> float | None:
        # _prepare_inputs = generation + weight sync + reward + old/ref log-prob passes (+ bookkeeping)
        prepare = row.get("trl_timer_s/_prepare_inputs")
        if prepare is None:
            return None
        known = _sum(row, "trl_timer_s/vLLM.generate", "trl_timer_s/sync_weights", "trl_timer_s/_calculate_rewards")
        return max(0.0, prepare - (known or 0.0))

    return {
        "step s": _median(steps, lambda r: r.get("timing_s/step")),
        "generation s": _median(steps, lambda r: r.get("trl_timer_s/vLLM.generate")),
        "reward s (ours, serial sum)": _median(steps, lambda r: r.get("trl_timer_s/_calculate_rewards")),
        "log-prob passes s": _median(steps, logprobs),
        "update s": _median(steps, update),
        "weight sync s": _median(steps, lambda r: r.get("trl_timer_s/sync_weights")),
        "generated tokens/s (step)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_step")),
        "reward mean": _median(steps, lambda r: r.get("trl/reward")),
        "GPU memory GB": _median(steps, lambda r: r.get("gpu/max_memory_reserved_gb")),
    }


def table(ours: dict[str, Any], trl: dict[str, Any], load: str) -> str:
    a, b = ours_columns(ours["steps"]), trl_columns(trl["steps"])
    lines = [f"Load: {load}; ours {len(ours['steps'])} steps, TRL {len(trl['steps'])} steps "
             "(medians over steps 2..N)", "", "| | verl-ext (verl main_ppo) | TRL GRPOTrainer | ours / TRL |",
             "|---|---:|---:|---:|"]
    for key in a:
        x, y = a[key], b.get(key)
        ratio = f"{x / y:.2f}" if x is not None and y else ""
        lines.append(f"| {key} | {_fmt(x)} | {_fmt(y)} | {ratio} |")
    lines += ["", "GPU memory: ours = the FSDP actor's peak reserved memory (vLLM runs in its own process with "
              "its gpu_memory_utilization share); TRL = torch peak reserved in the one process that also hosts "
              "colocated vLLM."]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", type=Path, required=True)
    parser.add_argument("--trl", type=Path, required=True)
    parser.add_argument("--load", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    text = table(json.loads(args.ours.read_text()), json.loads(args.trl.read_text()), args.load)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
