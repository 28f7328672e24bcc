"""Several GRPO runs on one figure: the same metric of each run per panel (verl's metrics JSONL files).

    python bench/learning/compare_runs.py --out docs/runs/X/compare.png \
        --run "entropy 0.01=runs/a/logs/grpo-*.metrics.jsonl" --run "KL 0.1=runs/b/logs/grpo-*.metrics.jsonl" \
        --keys collapse/answer_entropy,signal/group_share --val tic_tac_toe,connect_four

Training metrics are lines (per step); ``--val CASES`` adds one panel per case with verl's greedy held-out
validation (``val-core/<source>/<case>/reward/mean@1``) as markers; a mixed run logs single moves and whole games
of one case under two sources, so name the one to plot: ``--val openspiel-game/tic_tac_toe``.
``--curve NAME=exploitability_curve.json``
(the recipe's curve stage, ``verl_ext.evaluation.exploitability_curve``; repeat per run) adds one panel per poker
case with each run's exact exploitability over the GRPO steps and the uniform random policy's as a dashed line:

    python bench/learning/compare_runs.py --out docs/runs/X/kuhn_kl.png \
        --run "KL 0.5=runs/a/logs/grpo-*.metrics.jsonl" --keys actor/entropy \
        --curve "KL 0.5=runs/a/plots/exploitability_curve.json" --curve "KL 0.05=runs/b/plots/exploitability_curve.json"

The plotted numbers go to a JSON beside the PNG.
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

# Wider figures are unreadable once scaled to a page: panels wrap after this many a row.
PANELS_PER_ROW = 4


def read_run_metrics(pattern: str) -> Steps:
    """verl's metrics of every file matching ``pattern``, read in name order as one run (``runlog.read_runs``)."""
    paths = [Path(p) for p in sorted(glob.glob(pattern))] or [Path(pattern)]
    return read_runs(paths)[0]


def series(metrics: Steps, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` at the steps that have it."""
    return [(step, values[key]) for step, values in sorted(metrics.items()) if key in values]


def val_key(metrics: Steps, case: str) -> str | None:
    """The validation reward key of ``case``: ``CASE`` or ``SOURCE/CASE`` (``openspiel-game/tic_tac_toe``); the game
    name alone matches a case with parameters.

    Raises ValueError when a bare case is logged under several data sources (a mixed run's single moves and whole
    games): the plot would otherwise show whichever came first."""
    source, _, name = case.rpartition("/")
    found: list[str] = []
    for values in metrics.values():
        for key in values:
            # a case is named as verl logs it or by its game alone: "hanabi" for "hanabi(colors=2,...)", whose
            # commas cannot go through the comma list of --val
            parts = key.split("/")
            logged = parts[2] if len(parts) >= 3 else ""
            if (key.startswith("val-core/") and key.endswith("reward/mean@1") and name in (logged, logged.split("(")[0])
                    and source in ("", parts[1]) and key not in found):
                found.append(key)
    if len(found) > 1:
        sources = ", ".join(f"{key.split('/')[1]}/{name}" for key in found)
        raise ValueError(f"--val {case}: logged under several data sources ({sources}); name one as SOURCE/CASE")
    return found[0] if found else None


def read_curve(path: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, float]]:
    """One curve JSON's ``{case: [(step, exploitability)]}`` and the uniform random policy's exploitability per case.

    Raises ValueError naming the file when it is not an exploitability curve."""
    try:
        cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
        points = {case: [(int(p["step"]), float(p["exploitability"])) for p in data["points"]]
                  for case, data in cases.items()}
        uniform = {case: float(data["uniform_random"]["exploitability"]) for case, data in cases.items()
                   if "uniform_random" in data}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--curve {path}: not an exploitability_curve.json ({error!r})") from error
    return points, uniform


def parse_named(parser: argparse.ArgumentParser, flag: str, spec: str) -> tuple[str, str]:
    """NAME and VALUE of a ``NAME=VALUE`` flag value, or a parser error naming the flag."""
    name, sep, value = spec.partition("=")
    if not sep or not name or not value:
        parser.error(f"{flag}: expected NAME=PATH, got {spec!r}")
    return name, value


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, draw the panels, write PNG + JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], help="NAME=METRICS_GLOB (repeat per run)")
    parser.add_argument("--curve", action="append", default=[],
                        help="NAME=exploitability_curve.json (repeat per run): one exploitability panel per case")
    parser.add_argument("--keys", default="collapse/answer_entropy,signal/group_share,collapse/favourite_share")
    parser.add_argument("--val", default="", help="comma list of cases (CASE or SOURCE/CASE) whose held-out "
                        "validation to plot")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if not args.run and not args.curve:
        parser.error("name at least one --run or --curve")
    runs = {}
    for spec in args.run:
        name, pattern = parse_named(parser, "--run", spec)
        runs[name] = read_run_metrics(pattern)
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    uniform: dict[str, float] = {}
    for spec in args.curve:
        name, path = parse_named(parser, "--curve", spec)
        try:
            curves[name], references = read_curve(Path(path))
        except ValueError as error:
            parser.error(str(error))
        uniform.update(references)
    panels = [(key, key) for key in args.keys.split(",") if key] if runs else []
    panels += [(f"held-out {case} (greedy)", case) for case in args.val.split(",") if case and runs]
    curve_cases = list(dict.fromkeys(case for curve in curves.values() for case in curve))
    count = len(panels) + len(curve_cases)
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.8 * rows), squeeze=False)
    axes = list(grid.flat)
    for spare in axes[count:]:
        spare.set_visible(False)
    plotted: dict[str, dict[str, object]] = {}
    # one colour per run across panels, also in a panel where an earlier run has no points
    colours = {name: f"C{index % 10}" for index, name in enumerate(dict.fromkeys([*runs, *curves]))}
    for ax, (title, key) in zip(axes, panels):
        is_val = key in args.val.split(",")
        for name, metrics in runs.items():
            try:
                metric = val_key(metrics, key) if is_val else key
            except ValueError as error:
                parser.error(f"run {name!r}: {error}")
            points = series(metrics, metric) if metric else []
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if is_val else None, label=name, color=colours[name])
            plotted.setdefault(title, {})[name] = points
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax, case in zip(axes[len(panels):], curve_cases):
        title = f"{case} exploitability (exact)"
        for name, curve in curves.items():
            points = curve.get(case, [])
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o", label=name, color=colours[name])
            plotted.setdefault(title, {})[name] = points
        if case in uniform:
            ax.axhline(uniform[case], color="grey", linestyle="--", label=f"uniform random ({uniform[case]:.3f})")
            plotted[title]["uniform random"] = uniform[case]
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("GRPO step (0: cold start)")
        ax.set_ylim(bottom=0)
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
