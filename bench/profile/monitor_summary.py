"""What the machine did during each step of a bench session: GPU utilization and the busiest processes.

Reads what ``bench/profile/monitor.sh`` sampled once a second (``gpu.csv`` from nvidia-smi, ``top.txt`` from top) and the
session's ``session.txt`` (each step's end stamp and duration), and writes one table per step: mean GPU
utilization, the share of seconds the GPU was >= 90 % busy, the SM clock, and the processes with the most CPU
time (top's %CPU, 100 = one core, averaged over the step's seconds). A phase whose GPU is far from busy while one
process holds ~100 % is waiting on that process's Python thread.

    python bench/profile/monitor_summary.py /tmp/speed/monitor --session /tmp/speed/session.txt --out monitor.md
    python bench/profile/monitor_summary.py DIR --window "2026-11-25 04:22:00" "2026-11-25 04:23:00" --timeline 5
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

STEP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (.+): (.+), (\d+) s$")
TOP_CLOCK = re.compile(r"^top - (\d\d:\d\d:\d\d) ")
PYTHONS = re.compile(r"(^|/)python[0-9.]*$")


@dataclass
class GpuSample:
    time: datetime
    util: float
    sm_clock: float
    power: float


@dataclass
class TopFrame:
    time: datetime
    cpu_by_process: dict[str, float] = field(default_factory=dict)


@dataclass
class Window:
    label: str
    start: datetime
    end: datetime


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]" and the like
        return float("nan")


def read_gpu(path: Path) -> list[GpuSample]:
    """nvidia-smi's csv rows: timestamp, utilization %, SM clock, power, memory (no header, no units)."""
    samples = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            when = datetime.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")
        except ValueError:
            continue
        samples.append(GpuSample(when, _number(parts[1]), _number(parts[2]), _number(parts[3])))
    return samples


def process_name(command: str) -> str:
    """A short name for a command line: Ray's and vLLM's process titles as they are, `python SCRIPT` or
    `python -m MODULE` for interpreters, else the program's base name."""
    tokens = command.split()
    if not tokens:
        return "?"
    first = tokens[0]
    if PYTHONS.search(first) and len(tokens) > 1:
        rest = tokens[1:3] if tokens[1] == "-m" else tokens[1:2]
        return "python " + " ".join(rest)
    return first.rsplit("/", 1)[-1] if first.startswith("/") else first


def read_top(path: Path, day: datetime) -> list[TopFrame]:
    """top's frames (clock line + process rows); the first frame is left out: its %CPU counts since each
    process started. ``day`` gives the date top's clock line lacks; frames after midnight roll to the next day."""
    frames: list[TopFrame] = []
    current: TopFrame | None = None
    for line in path.read_text(errors="replace").splitlines():
        clock = TOP_CLOCK.match(line)
        if clock:
            when = datetime.combine(day.date(), datetime.strptime(clock.group(1), "%H:%M:%S").time())
            if frames and when < frames[-1].time - timedelta(hours=12):
                when += timedelta(days=1)
            current = TopFrame(when)
            frames.append(current)
            continue
        fields = line.split(None, 11)
        if current is None or len(fields) < 12:
            continue
        name = process_name(fields[11])
        current.cpu_by_process[name] = current.cpu_by_process.get(name, 0.0) + _number(fields[8])
    return frames[1:]


def read_windows(session: Path) -> list[Window]:
    """Each step of session.txt as a window: its end stamp minus its duration, to its end stamp."""
    windows = []
    for line in session.read_text().splitlines():
        match = STEP_LINE.match(line.strip())
        if match:
            end = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
            windows.append(Window(match.group(2), end - timedelta(seconds=int(match.group(4))), end))
    return windows


def summarize(window: Window, gpu: list[GpuSample], frames: list[TopFrame], top_n: int) -> dict:
    """GPU and CPU figures of one window (NaN where nothing was sampled)."""
    in_gpu = [s for s in gpu if window.start <= s.time < window.end]  # half-open: a second counts once
    in_top = [f for f in frames if window.start <= f.time < window.end]
    utils = [s.util for s in in_gpu if s.util == s.util]
    clocks = [s.sm_clock for s in in_gpu if s.sm_clock == s.sm_clock]
    totals: dict[str, float] = defaultdict(float)
    for frame in in_top:
        for name, cpu in frame.cpu_by_process.items():
            if cpu == cpu:
                totals[name] += cpu
    busiest = sorted(((total / len(in_top), name) for name, total in totals.items()), reverse=True)[:top_n]
    return {
        "seconds": int((window.end - window.start).total_seconds()),
        "gpu_util_mean": statistics.fmean(utils) if utils else float("nan"),
        "gpu_busy_share": sum(u >= 90 for u in utils) / len(utils) if utils else float("nan"),
        "sm_clock_mean": statistics.fmean(clocks) if clocks else float("nan"),
        "busiest": busiest,
    }


def timeline(window: Window, gpu: list[GpuSample], frames: list[TopFrame], bucket_s: int) -> list[str]:
    """One line per ``bucket_s`` seconds: GPU utilization and the three busiest processes."""
    lines = []
    start = window.start
    while start < window.end:
        end = min(start + timedelta(seconds=bucket_s), window.end)
        part = summarize(Window("", start, end), gpu, frames, 3)
        procs = ", ".join(f"{name} {cpu:.0f}%" for cpu, name in part["busiest"])
        lines.append(f"| {start:%H:%M:%S} | {part['gpu_util_mean']:.0f} | {procs} |")
        start = end
    return lines


def render(windows: list[Window], gpu: list[GpuSample], frames: list[TopFrame], top_n: int,
           bucket_s: int) -> str:
    out = ["| step | s | GPU util % (mean) | GPU >= 90 % busy | SM MHz | busiest processes (% of one core) |",
           "|---|---:|---:|---:|---:|---|"]
    for window in windows:
        s = summarize(window, gpu, frames, top_n)
        procs = "; ".join(f"{name} {cpu:.0f}" for cpu, name in s["busiest"])
        out.append(f"| {window.label} | {s['seconds']} | {s['gpu_util_mean']:.0f} | {s['gpu_busy_share']:.0%} | "
                   f"{s['sm_clock_mean']:.0f} | {procs} |")
    if bucket_s:
        for window in windows:
            out += ["", f"{window.label} (every {bucket_s} s)", "", "| from | GPU util % | busiest processes |",
                    "|---|---:|---|", *timeline(window, gpu, frames, bucket_s)]
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("monitor_dir", type=Path, help="bench/profile/monitor.sh's folder (gpu.csv, top.txt)")
    parser.add_argument("--session", type=Path, help="session.txt: one window per step")
    parser.add_argument("--window", nargs=2, metavar=("START", "END"),
                        help="'YYYY-MM-DD HH:MM:SS' twice (END not included)")
    parser.add_argument("--top", type=int, default=6, help="processes per step")
    parser.add_argument("--timeline", type=int, default=0, metavar="SECONDS", help="also a line per SECONDS")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.session and not args.window:
        parser.error("give --session SESSION_TXT or --window START END")
    if not (args.monitor_dir / "top.txt").is_file():
        parser.error(f"{args.monitor_dir}: no top.txt (bench/profile/monitor.sh writes it)")
    return args


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    if args.window:
        try:
            start, end = (datetime.strptime(w, "%Y-%m-%d %H:%M:%S") for w in args.window)
        except ValueError:
            raise SystemExit(f"--window: expected 'YYYY-MM-DD HH:MM:SS' twice, got {args.window}") from None
        windows = [Window(f"{args.window[0]} .. {args.window[1]}", start, end)]
    else:
        windows = read_windows(args.session)
        if not windows:
            raise SystemExit(f"{args.session}: no step lines ('DATE TIME LABEL: STATUS, N s')")
    gpu_path = args.monitor_dir / "gpu.csv"
    gpu = read_gpu(gpu_path) if gpu_path.is_file() else []
    frames = read_top(args.monitor_dir / "top.txt", windows[0].start)
    text = render(windows, gpu, frames, args.top, args.timeline)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
