"""Python's long garbage collections per process, from a run's console log (``[verl-ext] gc pause`` lines).

``GC_FREEZE=1`` (``verl_ext.patches.gc_freeze``) and ``GC_FREEZE=watch`` print a line for each collection of
0.05 s or longer in every process that imports verl; Ray forwards a worker's line to the driver's console as
``(WorkerDict pid=2322) [verl-ext] gc pause: generation 2, 0.312 s, ...``. This table counts them per process.

    python bench/profile/gc_pauses.py run.log [--out gc_pauses.md]        # gzip logs too
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import defaultdict
from pathlib import Path

MARK = "[verl-ext] gc pause"  # verl_ext.patches.gc_freeze.PAUSE_MARK (bench scripts run without verl_ext)
LINE = re.compile(r"(?:\((?P<process>[^()\s]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\S*\s+)?"
                  + re.escape(MARK) + r": generation (?P<generation>\d+), (?P<seconds>[0-9.]+) s")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_pauses(path: Path) -> list[tuple[str, int, float]]:
    """(process, generation, seconds) of each pause line; the driver's own lines have no Ray prefix."""
    opener = gzip.open if path.suffix == ".gz" else open
    pauses = []
    with opener(path, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if MARK not in line:
                continue
            match = LINE.search(ANSI.sub("", line))
            if match:
                process = f"{match['process']} pid={match['pid']}" if match["process"] else "driver"
                pauses.append((process, int(match["generation"]), float(match["seconds"])))
    return pauses


def table(pauses: list[tuple[str, int, float]]) -> str:
    by_process: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for process, generation, seconds in pauses:
        by_process[process].append((generation, seconds))
    lines = ["| process | pauses | generation 2 | total s | longest s |", "|---|---:|---:|---:|---:|"]
    for process, items in sorted(by_process.items(), key=lambda kv: -sum(s for _, s in kv[1])):
        seconds = [s for _, s in items]
        lines.append(f"| {process} | {len(items)} | {sum(g == 2 for g, _ in items)} | {sum(seconds):.3f} | "
                     f"{max(seconds):.3f} |")
    if not by_process:
        lines.append("| (no pause of 0.05 s or longer) | 0 | 0 | 0 | 0 |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.log.is_file():
        parser.error(f"{args.log}: no such file")
    text = table(read_pauses(args.log))
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
