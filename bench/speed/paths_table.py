"""One table of a paths session (bench/speed/paths_session.sh): per training path its GPUs, steps, step phases,
throughput, start-up and merge-ppo's verification, and the scaling efficiency of the two-GPU paths.

    python bench/speed/paths_table.py /tmp/paths --paths "one_gpu dp2 tp2" --out /tmp/paths/paths.md

Reads ``<dir>/<name>/summary.json`` (bench/speed/summarize_run.py via gpu_smoke.sh summary), ``startup.json`` and
``merge.log``. Step numbers are medians over steps 2..N of the run (``bench/speed/compare_speed.py``). Scaling
efficiency of a path on G GPUs = (its generated tokens per second of step) / (G x the one_gpu path's).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_speed import fmt, ours_columns, write_table  # noqa: E402  (bench/ is not a package)

GPUS = {"one_gpu": 1, "dp2": 2, "tp2": 2, "dp2_full_ft": 2}  # the rest run on one GPU
# Scaling efficiency only against the same method on one GPU (dp2_full_ft has no one-GPU full fine-tune beside it)
SCALES_AGAINST = {"dp2": "one_gpu", "tp2": "one_gpu"}
COLUMNS = ("step s", "generation s", "update s", "weight sync s", "generated tokens/s (step)")
VERIFY = re.compile(r"^verify: (.+?): max abs logit diff (\S+) .*?(OK|FAILED|informational)", re.MULTILINE)


def merge_result(log: Path) -> str:
    """merge-ppo --verify's verdict from its log: ``OK (n checks)``, ``FAILED: ...`` or ``not run``."""
    if not log.is_file():
        return "not run"
    text = log.read_text()
    if "verification failed" in text:  # merge-ppo's VerificationError lists every failed check
        return "FAILED: " + text.split("verification failed", 1)[1].strip(": \n").splitlines()[0]
    checks = [(what, diff, verdict) for what, diff, verdict in VERIFY.findall(text)
              if verdict != "informational"]
    failed = [f"{what} {diff}" for what, diff, verdict in checks if verdict != "OK"]
    if failed:
        return "FAILED: " + "; ".join(failed)
    return f"OK ({len(checks)} check{'s' if len(checks) > 1 else ''})" if checks else "no verify lines"


def row(root: Path, name: str) -> dict[str, Any]:
    """One path's numbers (None where it has none)."""
    where = root / name
    out: dict[str, Any] = {"path": name, "GPUs": GPUS.get(name, 1)}
    summary_file = where / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    if summary and summary.get("steps"):
        out.update(ours_columns(summary["steps"]))
        out["steps"] = len(summary["steps"])
    startup_file = where / "startup.json"
    if startup_file.is_file():
        out["start-up to step 1 s"] = json.loads(startup_file.read_text()).get("launch_to_step1_start_s")
    out["merge-ppo --verify"] = merge_result(where / "merge.log")
    return out


def table(root: Path, names: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table and its rows; a two-GPU path's scaling efficiency when its one-GPU baseline has numbers."""
    rows = [row(root, n) for n in names]
    rate_of = {r["path"]: r.get("generated tokens/s (step)") for r in rows}
    for r in rows:
        rate, base = r.get("generated tokens/s (step)"), rate_of.get(SCALES_AGAINST.get(r["path"], ""))
        r["scaling efficiency"] = rate / (r["GPUs"] * base) if base and rate else None
    keys = ("GPUs", "steps", *COLUMNS, "scaling efficiency", "start-up to step 1 s")
    lines = ["Training paths (medians over steps 2..N)", "",
             "| path | " + " | ".join(keys) + " | merge-ppo --verify |", "|---|" + "---:|" * len(keys) + "---|"]
    for r in rows:
        lines.append(f"| {r['path']} | " + " | ".join(fmt(r.get(k), missing="") for k in keys) +
                     f" | {r['merge-ppo --verify']} |")
    return "\n".join(lines) + "\n", rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the session's PATHS_DIR")
    parser.add_argument("--paths", required=True, help="the path names, space-separated")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    text, rows = table(args.root, args.paths.split())
    write_table(args.out, text, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
