"""Side-by-side table of one training-speed load: ours (bench/speed/summarize_run.py JSON) vs TRL (bench/speed/trl_grpo.py),
and our generation phase against its ceiling, vLLM's offline LLM.generate (bench/speed/vllm_offline.py).

    python bench/speed/compare_speed.py --ours ours.json [--trl trl.json] [--vllm vllm.json] --load "16 x 4 x 64" \
        --out compare.md

Every number is the median over steps 2..N (step 1 carries one-off warm-up such as CUDA graph capture), except the
step's mean and slowest step over the same steps (pauses that hit a few steps, such as Python's full garbage
collections, move the mean and not the median); the
vLLM column is the median over its generate calls 2..N. Completions differ in length between runs (random
sampling, different weights), so the note under the table also compares time per generated token.
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


def _mean(steps: list[Row], pick: Callable[[Row], float | None]) -> float | None:
    values = [v for v in (pick(s) for s in steps[1:] or steps) if v is not None]
    return statistics.fmean(values) if values else None


def _max(steps: list[Row], pick: Callable[[Row], float | None]) -> float | None:
    values = [v for v in (pick(s) for s in steps[1:] or steps) if v is not None]
    return max(values) if values else None


def _sum(row: Row, *keys: str) -> float | None:
    values = [row[k] for k in keys if k in row]
    return sum(values) if values else None


def ours_columns(steps: list[Row]) -> dict[str, float | None]:
    return {
        "step s": _median(steps, lambda r: r.get("timing_s/step")),
        "step s (mean)": _mean(steps, lambda r: r.get("timing_s/step")),
        "step s (slowest)": _max(steps, lambda r: r.get("timing_s/step")),
        "generation s": _median(steps, lambda r: r.get("timing_s/gen")),
        "reward s (ours, serial sum)": _median(steps, lambda r: (r["verl_ext/reward_ms_sum"] / 1000.0
                                                                 if "verl_ext/reward_ms_sum" in r else None)),
        "log-prob passes s": _median(steps, lambda r: _sum(r, "timing_s/old_log_prob", "timing_s/ref") or 0.0),
        "update s": _median(steps, lambda r: r.get("timing_s/update_actor")),
        "weight sync s": _median(steps, lambda r: r.get("timing_s/update_weights")),
        "generated tokens/s (step)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_step")),
        "generated tokens/s (generation)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_gen")),
        "mean completion tokens": _median(steps, lambda r: r.get("response_length/mean")),
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
        "step s (mean)": _mean(steps, lambda r: r.get("timing_s/step")),
        "step s (slowest)": _max(steps, lambda r: r.get("timing_s/step")),
        "generation s": _median(steps, lambda r: r.get("trl_timer_s/vLLM.generate")),
        "reward s (ours, serial sum)": _median(steps, lambda r: r.get("trl_timer_s/_calculate_rewards")),
        "log-prob passes s": _median(steps, logprobs),
        "update s": _median(steps, update),
        "weight sync s": _median(steps, lambda r: r.get("trl_timer_s/sync_weights")),
        "generated tokens/s (step)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_step")),
        "generated tokens/s (generation)": _median(steps, lambda r: r.get("generated_tokens_per_s_of_gen")),
        "mean completion tokens": _median(steps, lambda r: r.get("trl/completions/mean_length")),
        "reward mean": _median(steps, lambda r: r.get("trl/reward")),
        "GPU memory GB": _median(steps, lambda r: r.get("gpu/max_memory_reserved_gb")),
    }


def vllm_columns(result: dict[str, Any]) -> dict[str, float | None]:
    """The ceiling's numbers in our rows (bench/speed/vllm_offline.py JSON); rows it has no number for stay empty."""
    return {"generation s": result.get("generation_s"), "generated tokens/s (generation)": result.get("tokens_per_s"),
            "mean completion tokens": result.get("mean_tokens")}


STARTUP_ROW = "start-up s (to step 1 started)"


def table(ours: dict[str, Any], trl: dict[str, Any] | None, load: str, vllm: dict[str, Any] | None = None,
          ours_startup: dict[str, Any] | None = None) -> str:
    """The Markdown table (and notes) of one load; ``trl``/``vllm`` columns only for the results given.

    ``ours_startup``: bench/startup/startup_breakdown.py's JSON of our run, for the start-up row (with TRL's ``startup_s``).
    """
    a = ours_columns(ours["steps"])
    b = trl_columns(trl["steps"]) if trl else {}
    c = vllm_columns(vllm) if vllm else {}
    if ours_startup is not None or (trl or {}).get("startup_s") is not None:
        a[STARTUP_ROW] = (ours_startup or {}).get("launch_to_step1_start_s")
        b[STARTUP_ROW] = (trl or {}).get("startup_s")
    runs = [f"ours {len(ours['steps'])} steps"] + ([f"TRL {len(trl['steps'])} steps"] if trl else [])
    runs += [f"vLLM offline {len(vllm.get('runs', []))} generate calls"] if vllm else []
    header, rule = "| | verl-ext (verl main_ppo) |", "|---|---:|"
    if trl:
        header, rule = header + " TRL GRPOTrainer | ours / TRL |", rule + "---:|---:|"
    if vllm:
        header, rule = header + " vLLM offline (ceiling) | ours / vLLM |", rule + "---:|---:|"
    lines = [f"Load: {load}; {', '.join(runs)} (medians over steps 2..N unless the row says otherwise)", "",
             header, rule]
    for key in a:
        cells = [fmt(a[key])]
        if trl:
            cells += [fmt(b.get(key)), _ratio(a[key], b.get(key))]
        if vllm:
            cells += ["" if key not in c else fmt(c[key]), _ratio(a[key], c.get(key))]
        lines.append(f"| {key} | {' | '.join(cells)} |")
    lines += ["", "GPU memory: ours = the FSDP actor's peak reserved memory (vLLM runs in its own process with "
              "its gpu_memory_utilization share); TRL = torch peak reserved in the one process that also hosts "
              "colocated vLLM."]
    if STARTUP_ROW in a:
        lines += ["", "Start-up: ours from the train script's start (pre-flight, Ray, TaskRunner, FSDP actor, vLLM "
                  "server with its compile and graph capture) to step 1 starting (bench/startup/startup_breakdown.py); TRL "
                  "from bench/speed/trl_grpo.py's start (imports, model, LoRA, colocated vLLM engine) to its step 1."]
    if vllm:
        lines += ["", ceiling_note(a, c)]
    return "\n".join(lines) + "\n"


def ceiling_note(ours: dict[str, float | None], ceiling: dict[str, float | None]) -> str:
    """Our generation phase against vLLM offline: wall-time ratio and time-per-token ratio (target <= 1.2)."""
    time_ratio = _ratio(ours["generation s"], ceiling.get("generation s"))
    token_ratio = _ratio(ceiling.get("generated tokens/s (generation)"), ours["generated tokens/s (generation)"])
    return (f"Generation vs the vLLM ceiling (issue 14 target <= 1.2): wall time {time_ratio or 'n/a'}x, time per "
            f"generated token {token_ratio or 'n/a'}x (ours {fmt(ours['mean completion tokens'])} vs vLLM "
            f"{fmt(ceiling.get('mean completion tokens'))} tokens per completion).")


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}" if x is not None and y else ""


def write_table(out: Path, text: str, rows: Any) -> None:
    """Write a table (Markdown) to ``out``, its rows as JSON beside it (``.json``), and print the table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2))
    print(text, end="")


def fmt(value: float | None, missing: str = "n/a") -> str:
    """A table cell: thousands without decimals, smaller numbers to 3 significant digits."""
    if value is None:
        return missing
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", type=Path, required=True)
    parser.add_argument("--trl", type=Path, help="bench/speed/trl_grpo.py JSON")
    parser.add_argument("--vllm", type=Path, help="bench/speed/vllm_offline.py JSON (the generation ceiling)")
    parser.add_argument("--ours-startup", type=Path,
                        help="bench/startup/startup_breakdown.py JSON of our run (adds the start-up row)")
    parser.add_argument("--load", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    missing = [f"{flag} {path}" for flag, path in (("--ours", args.ours), ("--trl", args.trl), ("--vllm", args.vllm),
                                                   ("--ours-startup", args.ours_startup))
               if path is not None and not path.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    trl = json.loads(args.trl.read_text()) if args.trl else None
    vllm = json.loads(args.vllm.read_text()) if args.vllm else None
    startup = json.loads(args.ours_startup.read_text()) if args.ours_startup else None
    text = table(json.loads(args.ours.read_text()), trl, args.load, vllm, startup)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
