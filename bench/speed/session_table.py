"""One table of a speed session (bench/speed/speed_session.sh): every run of ours and of TRL, in the order they ran.

    python bench/speed/session_table.py /tmp/speed [--out session.md]

Reads ``session.txt`` (each step's end, line and seconds), each run of ours' ``<load>/<label>/ours.json``
(bench/speed/summarize_run.py; the unlabelled run's is ``<load>/ours.json``) and ``startup.json``, and TRL's runs
(``<load>/trl.<stamp>.json``, or ``<load>/trl.json`` for a session from before they were kept). Per run: the step's
median, mean and slowest step over steps 2..N (bench/speed/compare_speed.py's columns), generation, update, weight sync,
start-up, and the ratio to the TRL run of the same load that ran closest before it (after it if none ran before).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_speed import fmt, ours_columns, trl_columns  # noqa: E402  (bench/ is not a package)

STEP = re.compile(r"^(?P<end>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?P<load>realistic|smoke) (?P<what>ours|trl) "
                  r"(?P<steps>\S+)(?P<rest>.*?): (?P<status>.+), (?P<seconds>\d+) s$")
COLUMNS = ("step s", "step s (mean)", "step s (slowest)", "generation s", "update s", "weight sync s")


@dataclass
class Run:
    load: str
    what: str  # ours | trl
    label: str
    setting: str
    end: datetime
    status: str
    columns: dict[str, float | None]
    startup_s: float | None


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def runs_of(session_dir: Path) -> list[Run]:
    """The session's runs of ours and TRL, in the order session.txt lists them (each counted once)."""
    runs: list[Run] = []
    seen: set[tuple[str, str, str]] = set()
    text = (session_dir / "session.txt").read_text() if (session_dir / "session.txt").is_file() else ""
    trl_lines = {load: 0 for load in ("realistic", "smoke")}
    for line in text.splitlines():
        match = STEP.match(line.strip())
        if match and match["what"] == "trl":
            trl_lines[match["load"]] += 1
    trl_files: dict[str, list[Path | None]] = {}
    for load, count in trl_lines.items():
        stamped = sorted((session_dir / load).glob("trl.2*.json"))
        # before each TRL run was kept, trl.json held the load's last run only
        trl_files[load] = stamped or [None] * max(count - 1, 0) + [session_dir / load / "trl.json"]
    trl_used = {load: 0 for load in trl_files}
    for line in text.splitlines():
        match = STEP.match(line.strip())
        if not match:
            continue
        load, what, rest = match["load"], match["what"], match["rest"].split()
        end = datetime.strptime(match["end"], "%Y-%m-%d %H:%M:%S")
        if what == "ours":
            label = rest[0] if rest else ""
            key = (load, what, label)
            if key in seen:  # `wait` repeats the running step's line when it ends
                continue
            seen.add(key)
            folder = session_dir / load / label if label else session_dir / load
            result = read_json(folder / "ours.json")
            startup = read_json(folder / "startup.json") or {}
            runs.append(Run(load, what, label or "(defaults)", " ".join(rest[1:]), end, match["status"],
                            ours_columns(result["steps"]) if result else {}, startup.get("launch_to_step1_start_s")))
        else:
            files = trl_files[load]
            index = trl_used[load]
            trl_used[load] += 1
            path = files[index] if index < len(files) else None
            result = read_json(path) if path is not None else None
            status = match["status"] if result or path is not None else f"{match['status']}; its file was overwritten"
            runs.append(Run(load, what, f"TRL {index + 1}", " ".join(rest), end, status,
                            trl_columns(result["steps"]) if result else {},
                            (result or {}).get("startup_s")))
    return runs


def reference(run: Run, runs: list[Run]) -> Run | None:
    """The TRL run of the same load closest before ``run`` (else the first after it)."""
    trl = [r for r in runs if r.what == "trl" and r.load == run.load and r.columns.get("step s")]
    before = [r for r in trl if r.end <= run.end]
    return before[-1] if before else (trl[0] if trl else None)


def table(runs: list[Run]) -> str:
    lines = []
    for load in ("smoke", "realistic"):
        rows = [r for r in runs if r.load == load]
        if not rows:
            continue
        lines += [f"### {load}", "", "| run | setting | " + " | ".join(COLUMNS) + " | start-up s | ours / TRL (step) |",
                  "|---|---|" + "---:|" * (len(COLUMNS) + 2)]
        for run in rows:
            ratio = ""
            trl = reference(run, runs) if run.what == "ours" else None
            if trl and run.columns.get("step s"):
                ratio = f"{run.columns['step s'] / trl.columns['step s']:.2f} ({trl.label})"
            cells = [fmt(run.columns.get(c)) if run.columns else "no result" for c in COLUMNS]
            status = "" if run.status == "ok" else f" ({run.status})"
            lines.append(f"| {run.label}{status} | {run.setting} | " + " | ".join(cells)
                         + f" | {fmt(run.startup_s)} | {ratio} |")
        lines.append("")
    return "\n".join(lines) if lines else "no runs of ours or TRL in session.txt\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session_dir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (args.session_dir / "session.txt").is_file():
        parser.error(f"{args.session_dir}: no session.txt (a bench/speed/speed_session.sh folder has one)")
    text = table(runs_of(args.session_dir))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
