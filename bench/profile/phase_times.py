"""Tabulate the worker-side phase times that ``verl_ext.patches.phase_timer`` prints into a run's console log.

Each actor ``update_actor`` / ``update_weights`` call prints one ``[verl-ext] phase times KIND {json}`` line
(Ray prefixes it with the worker's name). This script takes the median of each phase over the steps after the
first ``--skip`` (step 1 includes warm-up) and writes one markdown table per kind, phases by time.

    python bench/profile/phase_times.py /tmp/speed/smoke/phases/console.log --skip 1 --out phase_times.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

MARK = "[verl-ext] phase times "  # verl_ext.patches.phase_timer.MARK, without importing verl_ext (bench scripts run bare)


def read_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def parse(text: str) -> dict[str, list[dict[str, dict[str, float]]]]:
    """Reports by kind, in the order printed."""
    reports: dict[str, list[dict[str, dict[str, float]]]] = defaultdict(list)
    for line in text.splitlines():
        at = line.find(MARK)
        if at < 0:
            continue
        kind, _, payload = line[at + len(MARK):].partition(" ")
        try:
            reports[kind].append(json.loads(payload))
        except json.JSONDecodeError:
            continue  # a line cut by the log's interleaving: not a report
    return reports


def table(reports: list[dict[str, dict[str, float]]], skip: int) -> str:
    """Median seconds and calls of each phase over ``reports[skip:]``, longest first."""
    kept = reports[skip:] or reports
    seconds: dict[str, list[float]] = defaultdict(list)
    calls: dict[str, list[float]] = defaultdict(list)
    for report in kept:
        for phase, value in report.items():
            seconds[phase].append(value["s"])
            calls[phase].append(value["calls"])
    rows = sorted(seconds, key=lambda phase: -statistics.median(seconds[phase]))
    lines = [f"{len(kept)} steps (of {len(reports)}; the first {len(reports) - len(kept)} left out)", "",
             "| phase | median s | min s | max s | calls per step |", "|---|---:|---:|---:|---:|"]
    for phase in rows:
        values = seconds[phase]
        lines.append(f"| {phase} | {statistics.median(values):.4f} | {min(values):.4f} | {max(values):.4f} | "
                     f"{statistics.median(calls[phase]):g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("console", type=Path, help="a run's console log (.gz read too)")
    parser.add_argument("--skip", type=int, default=1, help="leave out the first N reports of each kind")
    parser.add_argument("--out", type=Path, help="write the tables here as well")
    args = parser.parse_args(argv)
    reports = parse(read_text(args.console))
    if not reports:
        parser.error(f"{args.console}: no '{MARK.strip()}' lines (was verl_ext.patches.phase_timer loaded?)")
    text = "\n\n".join(f"## {kind}\n\n{table(items, args.skip)}" for kind, items in sorted(reports.items())) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
