"""How much of each GRPO step PPO's clip touched, run by run (issue 45: does clip-higher act at all?).

verl logs ``actor/pg_clipfrac`` (the share of response tokens whose ratio pi / pi_old left the clip range on the
side their advantage pushes, so that their gradient was cut) and ``actor/pg_clipfrac_lower`` (the dual-clip bound).
DAPO's clip-higher (``actor_rollout_ref.actor.clip_ratio_high``) only moves the upper bound, so it can change an
update only where ``pg_clipfrac`` is above 0. With the default update (one mini-batch, one epoch) the old log-probs
are the update's own (``verl_ext.patches.on_policy_update``): the ratio is 1 and nothing is clipped. A run whose
metrics carry ``actor/entropy_estimate`` and no ``actor/entropy`` skipped verl's old-log-prob pass that way.

    python bench/learning/clip_share.py docs/runs/*/*/logs/*.metrics.jsonl --out clip_share

prints a markdown table (one row per metrics file: steps, whether the pass ran, the largest and mean clip
fractions) and a summary per kind of update; ``--out X`` writes ``X.md`` and ``X.json`` too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from verl_ext.runlog import read_metrics

CLIP_KEYS = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower")


def clip_share(path: Path) -> dict[str, Any] | None:
    """One metrics file's clip fractions: steps with them, whether verl's old-log-prob pass ran, the largest and
    mean of each; None when the file logs no clip fraction (e.g. an SFT run)."""
    steps = [row for _, row in sorted(read_metrics(path, prefixes=("actor/",)).items())
             if any(key in row for key in CLIP_KEYS)]
    if not steps:
        return None
    skipped = all("actor/entropy_estimate" in row and "actor/entropy" not in row for row in steps)
    result: dict[str, Any] = {"file": str(path), "steps": len(steps), "old_log_prob_pass": not skipped}
    for key in CLIP_KEYS:
        values = [row[key] for row in steps if key in row]
        name = key.split("/")[1]
        result[f"{name}_max"] = max(values, default=0.0)
        result[f"{name}_mean"] = statistics.fmean(values) if values else 0.0
    return result


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """One line per kind of update: files, steps, steps with any token clipped, the largest clip fraction."""
    lines = []
    for ran, kind in ((False, "old log-probs from the update (on-policy, the default)"),
                      (True, "verl's old-log-prob pass")):
        group = [row for row in rows if row["old_log_prob_pass"] is ran]
        if not group:
            continue
        largest = max(max(row["pg_clipfrac_max"], row["pg_clipfrac_lower_max"]) for row in group)
        clipped = sum(1 for row in group if row["pg_clipfrac_max"] > 0 or row["pg_clipfrac_lower_max"] > 0)
        lines.append(f"- {kind}: {len(group)} runs, {sum(row['steps'] for row in group)} steps; "
                     f"{clipped} runs clipped any token; largest clip fraction of a step {largest:.4f}")
    return lines


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of ``rows``."""
    out = ["| metrics file | steps | old-log-prob pass | pg_clipfrac max | pg_clipfrac mean | lower max |",
           "|---|---|---|---|---|---|"]
    for row in rows:
        out.append(f"| `{row['file']}` | {row['steps']} | {'ran' if row['old_log_prob_pass'] else 'skipped'} | "
                   f"{row['pg_clipfrac_max']:.4f} | {row['pg_clipfrac_mean']:.5f} | "
                   f"{row['pg_clipfrac_lower_max']:.4f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", nargs="+", type=Path, help="verl *.metrics.jsonl files")
    parser.add_argument("--out", type=Path, help="also write OUT.md and OUT.json")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.metrics if not path.is_file()]
    if missing:
        print(f"clip_share: no such metrics file: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = []
    for path in args.metrics:
        try:
            row = clip_share(path)
        except ValueError as error:  # a line in the middle that is not JSON: named with its file and line
            print(f"clip_share: {error}", file=sys.stderr)
            return 2
        if row is not None:
            rows.append(row)
    if not rows:
        print("clip_share: none of the files logs actor/pg_clipfrac (not GRPO/PPO metrics?)", file=sys.stderr)
        return 2
    totals = summary(rows)
    text = "\n".join(table(rows) + [""] + totals) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({"runs": rows, "summary": totals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
