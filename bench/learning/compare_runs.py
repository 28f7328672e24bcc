"""Several GRPO runs on one figure: the same metric of each run per panel (verl's metrics JSONL files).

    python bench/learning/compare_runs.py --out docs/runs/X/compare.png \
        --run "entropy 0.01=runs/a/logs/grpo-*.metrics.jsonl" --run "KL 0.1=runs/b/logs/grpo-*.metrics.jsonl" \
        --keys collapse/answer_entropy,signal/group_share --val tic_tac_toe,connect_four

Training metrics are lines (per step); ``--val CASES`` adds one panel per case with verl's greedy held-out
validation (``val-core/<source>/<case>/reward/mean@1``) as markers. The plotted numbers go to a JSON beside the PNG.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import matplotlib

from verl_ext.runlog import Steps, read_runs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_run_metrics(pattern: str) -> Steps:
    """verl's metrics of every file matching ``pattern``, read in name order as one run (``runlog.read_runs``)."""
    paths = [Path(p) for p in sorted(glob.glob(pattern))] or [Path(pattern)]
    return read_runs(paths)[0]


def series(metrics: Steps, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` at the steps that have it."""
    return [(step, values[key]) for step, values in sorted(metrics.items()) if key in values]


def val_key(metrics: Steps, case: str) -> str | None:
    """The validation reward key of ``case`` (whatever its data source)."""
    for values in metrics.values():
        for key in values:
            if key.startswith("val-core/") and key.split("/")[2] == case and key.endswith("reward/mean@1"):
                return key
    return None


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, draw the panels, write PNG + JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, help="NAME=METRICS_GLOB (repeat per run)")
    parser.add_argument("--keys", default="collapse/answer_entropy,signal/group_share,collapse/favourite_share")
    parser.add_argument("--val", default="", help="comma list of cases whose held-out validation to plot")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    runs = {}
    for spec in args.run:
        name, sep, pattern = spec.partition("=")
        if not sep or not name or not pattern:
            parser.error(f"--run: expected NAME=METRICS_GLOB, got {spec!r}")
        runs[name] = read_run_metrics(pattern)
    panels = [(key, key) for key in args.keys.split(",") if key]
    panels += [(f"held-out {case} (greedy)", case) for case in args.val.split(",") if case]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    plotted: dict[str, dict[str, list]] = {}
    for ax, (title, key) in zip(axes[0], panels):
        is_val = key in args.val.split(",")
        for name, metrics in runs.items():
            metric = val_key(metrics, key) if is_val else key
            points = series(metrics, metric) if metric else []
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if is_val else None, label=name)
            plotted.setdefault(title, {})[name] = points
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    args.out.with_suffix(".json").write_text(json.dumps(plotted, indent=1))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
