"""The cold start to train GRPO from, out of an SFT sweep (bench/learning/gpu_sft_sweep.sh): the variant whose model
scores above the fixed-move line on every game of its held-out single-move eval, by the largest smallest margin.

    python bench/learning/best_cold_start.py /tmp/sweep/*/eval/results.json --model sft

Prints one line per variant (its engine score and margin per case) on stderr and the best variant's folder name
(the folder two levels above its results.json) on stdout; exits 1 when no variant is above the line everywhere:
GRPO from a model that has not learnt to read the board ends at the fixed move (docs/runs/2026-11-27-h100-smollm2-ref/).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def margins(results: dict, model: str) -> dict[str, float]:
    """Per case: ``model``'s held-out engine score minus the best fixed move's score on the same positions."""
    baseline = results.get("single_move_baseline") or {}
    cases = results["models"][model]["single_move"]["cases"]
    out: dict[str, float] = {}
    for case, summary in cases.items():
        score = summary.get("engine_score")
        line = (baseline.get(case) or {}).get("best_fixed_score")
        if score is None or line is None:
            raise ValueError(f"case {case}: no engine score or no fixed-move line in the results "
                             "(run verl-ext eval --suites single on a game with terminal rewards)")
        out[case] = float(score) - float(line)
    return out


def best_variant(paths: list[Path], model: str) -> tuple[str | None, list[str]]:
    """The variant (folder name) above the line on every case with the largest smallest margin, and a report line
    per variant."""
    best, best_margin, lines = None, 0.0, []
    for path in paths:
        name = path.parent.parent.name
        per_case = margins(json.loads(path.read_text()), model)
        worst = min(per_case.values())
        lines.append(f"{name}: " + ", ".join(f"{case} {margin:+.3f}" for case, margin in sorted(per_case.items()))
                     + f" (smallest {worst:+.3f})")
        if worst > 0 and (best is None or worst > best_margin):
            best, best_margin = name, worst
    return best, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="each variant's eval/results.json")
    parser.add_argument("--model", default="sft", help="the model label in the results (default: sft)")
    args = parser.parse_args(argv)
    best, lines = best_variant(args.results, args.model)
    for line in lines:
        print(line, file=sys.stderr)
    if best is None:
        print("no variant is above the fixed-move line on every game", file=sys.stderr)
        return 1
    print(best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
