"""Where the time goes in a torch profiler chrome trace: total time per event name, per category.

verl writes these traces with ``global_profiler.tool=torch`` (see docs/training.md "Profiling a step");
this prints the GPU kernels, CPU ops and verl's annotated stages that take the most time, without a browser.

    python bench/trace_top.py outputs/profile/*.json.gz --top 15 --out top.md
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation")


def load_events(path: Path) -> list[dict]:
    """The complete ('X') events of a chrome trace, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        trace = json.load(handle)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def totals_by_category(events: list[dict]) -> dict[str, dict[str, tuple[float, int]]]:
    """category -> name -> (total milliseconds, count)."""
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for event in events:
        entry = totals[event.get("cat", "")][event.get("name", "?")]
        entry[0] += event["dur"] / 1000.0
        entry[1] += 1
    return {cat: {name: (ms, int(n)) for name, (ms, n) in names.items()} for cat, names in totals.items()}


def render(path: Path, events: list[dict], top: int) -> str:
    """A markdown report: trace span, busy GPU time, and the top names per category."""
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    totals = totals_by_category(events)
    gpu_ms = sum(ms for name, (ms, _) in totals.get("kernel", {}).items())
    lines = [f"## {path.name}", "", f"trace span {(end - start) / 1000:.1f} ms, GPU kernel time {gpu_ms:.1f} ms", ""]
    for cat in CATEGORIES:
        names = totals.get(cat)
        if not names:
            continue
        lines += [f"### {cat}", "", "| name | total ms | count |", "|---|---:|---:|"]
        for name, (ms, count) in sorted(names.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"| {name[:90].replace('|', '/')} | {ms:.1f} | {count} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    reports = []
    for path in args.traces:
        events = load_events(path)
        if not events:
            raise SystemExit(f"{path}: no complete events in trace")
        reports.append(render(path, events, args.top))
    report = "\n".join(reports)
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
