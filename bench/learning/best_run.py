"""The run under a driver's ROOT whose GRPO model did best in its arena eval, for the calls that bring one kept model
back from a lent machine (``KEEP_RUN_MODELS=1``, bench/learning/gpu_shared_cold_start.sh) when they are sent before
the results are known:

    n=$(python3 bench/learning/best_run.py /tmp/bg --kept) && \\
      bash bench/device/cold_start_parts.sh out /tmp/bg/kept-models/$n "$OUT" 0 $n

A run is ranked by its lowest win rate against OPPONENT over the cases it played (issue 45's target is 85 % at every
game, so the weakest game decides), then by the mean. The ranking goes to stderr, the best run's name to stdout; exit
1 when no run has an eval with that opponent. No GPU, no model: it reads ROOT/<run>/eval/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def win_rates(results: dict[str, Any], model: str, opponent: str) -> dict[str, float]:
    """``model``'s win rate against ``opponent`` per case, from a ``verl-ext eval`` results.json."""
    matches = (((results.get("models") or {}).get(model) or {}).get("arena") or {}).get("matches") or []
    return {str(m["case"]): float(m["win"]["rate"]) for m in matches
            if m.get("opponent") == opponent and isinstance(m.get("win"), dict) and "rate" in m["win"]}


def ranking(root: Path, model: str, opponent: str, kept: bool) -> list[tuple[str, float, float, dict[str, float]]]:
    """(run, lowest rate, mean rate, rates by case) for every run folder with such an eval, best first."""
    rows = []
    for results_path in sorted(root.glob("*/eval/results.json")):
        run = results_path.parent.parent.name
        if kept and not (root / "kept-models" / run / "SHA256SUMS").is_file():
            continue
        try:
            rates = win_rates(json.loads(results_path.read_text(encoding="utf-8")), model, opponent)
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"best_run: {results_path}: unreadable ({error!r}); left out", file=sys.stderr)
            continue
        if rates:
            rows.append((run, min(rates.values()), sum(rates.values()) / len(rates), rates))
    return sorted(rows, key=lambda row: (-row[1], -row[2], row[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the driver's ROOT (run folders ROOT/<run>/eval/results.json)")
    parser.add_argument("--opponent", default="random", help="the arena opponent to rank by (default random)")
    parser.add_argument("--model", default="grpo", help="the eval's model label to rank (default grpo)")
    parser.add_argument("--kept", action="store_true", help="only runs whose model ROOT/kept-models/<run> holds")
    args = parser.parse_args(argv)
    rows = ranking(args.root, args.model, args.opponent, args.kept)
    for run, lowest, mean, rates in rows:
        cases = ", ".join(f"{case} {100 * rate:.1f} %" for case, rate in sorted(rates.items()))
        print(f"{run}: lowest {100 * lowest:.1f} %, mean {100 * mean:.1f} % against {args.opponent} ({cases})",
              file=sys.stderr)
    if not rows:
        print(f"best_run: no run under {args.root} has a {args.model} eval against {args.opponent}"
              + (" and a kept model" if args.kept else ""), file=sys.stderr)
        return 1
    print(rows[0][0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
