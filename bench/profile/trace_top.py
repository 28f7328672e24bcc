"""Where the time goes in a torch profiler chrome trace: total time per event name, per category.

verl writes these traces with ``global_profiler.tool=torch`` (see docs/training.md "Profiling a step");
this prints the GPU kernels, CPU ops and verl's annotated stages that take the most time, without a browser.

    python bench/profile/trace_top.py outputs/profile/*.json.gz --top 15 --out top.md
    python bench/profile/trace_top.py TRACE.json.gz --span actor_update   # is that stage GPU- or CPU-bound?

``--span NAME`` adds, for the first annotated region of that name (verl's ``actor_update``, ``micro_batch0``...),
how long the GPU was busy inside it (kernels, copies and memsets, overlaps merged), how many CPU ops and kernel
launches it issued, and how long the CPU waited in synchronizations: a stage whose GPU is busy for a small share
of its span and whose syncs wait for nothing is bound by the CPU issuing work, not by the GPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


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


def merged_ms(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals in microseconds, as milliseconds."""
    total, current = 0.0, None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    if current is not None:
        total += current[1] - current[0]
    return total / 1000.0


def span_summary(events: list[dict], name: str) -> dict[str, float] | None:
    """GPU busy time, CPU ops, kernel launches and synchronization waits inside the first annotated region ``name``
    (None when the trace has no such region). GPU work counts by its start inside the region."""
    regions = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == name]
    if not regions:
        return None
    region = min(regions, key=lambda e: e["ts"])
    low, high = region["ts"], region["ts"] + region["dur"]
    inside = [e for e in events if low <= e["ts"] <= high]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in inside if e.get("cat") in GPU_WORK]
    runtime = [e for e in inside if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    syncs = [e for e in runtime if e.get("name") in SYNCS]
    span_ms = region["dur"] / 1000.0
    busy_ms = merged_ms(gpu)
    return {
        "span_ms": span_ms,
        "gpu_busy_ms": busy_ms,
        "gpu_busy_share": busy_ms / span_ms if span_ms else 0.0,
        "cpu_ops": sum(1 for e in inside if e.get("cat") == "cpu_op"),
        "kernel_launches": sum(1 for e in runtime if e.get("name") in LAUNCHES),
        "syncs": len(syncs),
        "sync_wait_ms": sum(e["dur"] for e in syncs) / 1000.0,
    }


def render_span(name: str, summary: dict[str, float] | None) -> str:
    """The span summary as a markdown paragraph."""
    if summary is None:
        return f"### span `{name}`\n\nnot in this trace\n"
    return (f"### span `{name}`\n\n{summary['span_ms']:.1f} ms; GPU busy {summary['gpu_busy_ms']:.1f} ms "
            f"({100 * summary['gpu_busy_share']:.0f} %); {summary['cpu_ops']:,} CPU ops, "
            f"{summary['kernel_launches']:,} kernel launches; {summary['syncs']} synchronizations waiting "
            f"{summary['sync_wait_ms']:.1f} ms in all\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--span", action="append", default=[],
                        help="annotated region to summarise (GPU busy share, CPU ops, syncs); repeatable")
    args = parser.parse_args()
    reports = []
    for path in args.traces:
        events = load_events(path)
        if not events:
            raise SystemExit(f"{path}: no complete events in trace")
        reports.append(render(path, events, args.top))
        reports += [render_span(name, span_summary(events, name)) for name in args.span]
    report = "\n".join(reports)
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
