"""``verl-ext plot``: training curves (PNG + the plotted numbers as JSON) from a run's metrics and sample logs.

    verl-ext plot logs/openspiel-grpo-full-*.metrics.jsonl --out plots/            # GRPO: reward, legal, ...
    verl-ext plot logs/sft-*.metrics.jsonl --out plots/ --name sft                   # SFT: loss curves

Several files are read in order (a resumed run's steps follow the earlier run's). GRPO runs get reward,
legal-move rate, format rate, task score (the engine value of the move with ``reward_mode=engine``),
full-game outcome rates and turns (``TASK_MODE=game``), the learning signal (share of GRPO groups whose rewards
differ, ``signal/*``) and policy collapse (answers per group, ``collapse/*``; ``verl_ext/patches/step_signal.py``), response
length and step time per step: training samples (sampled at the rollout temperature, from the
``*.samples.jsonl`` beside each metrics file) as lines, held-out validation (verl's ``val-*`` metrics, greedy,
per data source) as markers. SFT runs get train/validation loss, learning rate and gradient norm.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .figure import png_figure
from .runlog import Steps, read_runs

_VAL_KEY = re.compile(r"^val-(?:core|aux)/(?P<source>.+)/(?P<var>[^/]+)/mean@\d+$")


@dataclass
class Panel:
    """One subplot: named series of (step, value) points."""

    title: str
    lines: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    markers: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    ylim: tuple[float, float] | None = None

    def add(self, label: str, points: list[tuple[int, float]], marker: bool = False) -> None:
        if points:
            (self.markers if marker else self.lines)[label] = points

    @property
    def empty(self) -> bool:
        return not self.lines and not self.markers


def _series(steps: Steps, key: str) -> list[tuple[int, float]]:
    return [(step, values[key]) for step, values in sorted(steps.items()) if key in values]


def _validation(metrics: Steps, var: str) -> dict[str, list[tuple[int, float]]]:
    """verl's held-out metrics of one reward field (``score`` is logged as ``reward``) per data source."""
    found: dict[str, list[tuple[int, float]]] = {}
    for step, values in sorted(metrics.items()):
        for key, value in values.items():
            match = _VAL_KEY.match(key)
            if match and match.group("var") == var:
                found.setdefault(match.group("source"), []).append((step, value))
    return found


def grpo_panels(metrics: Steps, samples: Steps) -> list[Panel]:
    """The GRPO/PPO curves: what the policy earns and how it answers, per step."""
    rate = (-0.02, 1.02)
    specs = [  # title, sample-log key (training), verl key (training), validation field, y range
        ("reward (mean)", "reward_mean", "critic/score/mean", "reward", rate),
        ("legal-move rate", "legal_rate", None, "valid", rate),
        ("format rate", "format_rate", None, "format_ok", rate),
        ("task score (engine: move value vs best)", "task_score", None, "task_score", rate),
    ]
    panels = []
    for title, sample_key, verl_key, val_var, ylim in specs:
        panel = Panel(title, ylim=ylim)
        train = _series(metrics, verl_key) if verl_key else []
        panel.add("train (sampled)", train or _series(samples, sample_key))
        for source, points in _validation(metrics, val_var).items():
            panel.add(f"held-out {source} (greedy)", points, marker=True)
        panels.append(panel)
    if any("games" in values for values in samples.values()):
        games = Panel("full games: outcome rates", ylim=rate)
        for key in ("win", "draw", "loss", "forfeit", "truncated"):
            games.add(f"{key} (train)", _series(samples, f"game_{key}"))
        for source, points in _validation(metrics, "win").items():
            games.add(f"win, held-out {source} (greedy)", points, marker=True)
        turns = Panel("full games: model turns and tokens per game")
        turns.add("model turns", _series(samples, "game_model_turns"))
        turns.add("model tokens / 10", [(step, v / 10) for step, v in _series(samples, "game_model_tokens")])
        panels += [games, turns]
    panels += signal_panels(metrics)
    length = Panel("response length (tokens)")
    length.add("mean", _series(metrics, "response_length/mean"))
    length.add("max", _series(metrics, "response_length/max"))
    length.add("cap", _series(metrics, "signal/response_cap"))
    timing = Panel("step time (s)")
    for key, label in (("timing_s/step", "step"), ("timing_s/gen", "generation"),
                       ("timing_s/update_actor", "actor update")):
        timing.add(label, _series(metrics, key))
    return panels + [length, timing]


def signal_panels(metrics: Steps) -> list[Panel]:
    """The per-step learning-signal and collapse metrics (``verl_ext.group_stats``), with the warning thresholds."""
    from .signal_alarm import FAVOURITE_SHARE, NO_SIGNAL_SHARE

    signal = Panel("learning signal (GRPO groups)", ylim=(-0.02, 1.02))
    signal.add("groups with differing rewards", _series(metrics, "signal/group_share"))
    signal.add("format rate", _series(metrics, "signal/format_rate"))
    signal.add("valid rate", _series(metrics, "signal/valid_rate"))
    signal.add("replies at the token cap", _series(metrics, "signal/replies_at_cap"))
    if not signal.empty:
        signal.add(f"warning below {NO_SIGNAL_SHARE:g}", _level(metrics, "signal/group_share", NO_SIGNAL_SHARE))
    collapse = Panel("collapse: answers within a group")
    collapse.add("answer entropy (nats)", _series(metrics, "collapse/answer_entropy"))
    collapse.add("favourite-answer share", _series(metrics, "collapse/favourite_share"))
    collapse.add("distinct answers / group size", _series(metrics, "collapse/distinct_share"))
    # a mixed batch: the single moves' own (what the alarm reads) and the games' openings'
    collapse.add("single moves: answer entropy", _series(metrics, "collapse/moves/answer_entropy"))
    collapse.add("single moves: favourite share", _series(metrics, "collapse/moves/favourite_share"))
    collapse.add("game openings: favourite share", _series(metrics, "collapse/openings/favourite_share"))
    if not collapse.empty:
        collapse.add(f"favourite warning above {FAVOURITE_SHARE:g}",
                     _level(metrics, "collapse/favourite_share", FAVOURITE_SHARE))
    per_case = Panel("favourite answer's share of a case's replies", ylim=(-0.02, 1.02))
    prefix = "collapse/favourite_share/"
    for key in sorted({key for values in metrics.values() for key in values if key.startswith(prefix)}):
        per_case.add(key[len(prefix):], _series(metrics, key))
    tactics = Panel("one-ply tactics: wins taken, threats blocked", ylim=(-0.02, 1.02))
    for name, chance in (("win_taken", "win_chance"), ("blocked", "block_chance")):
        keys = sorted({key for values in metrics.values() for key in values if key.startswith(f"tactics/{name}/")})
        for key in keys:
            tactics.add(f"{name.replace('_', ' ')}: {key.split('/')[-1]}", _series(metrics, key))
        # verl's validation averages the 0/1 extras over all samples: the share is their ratio
        chances = _validation(metrics, chance)
        for source, points in _validation(metrics, name).items():
            per_step = dict(chances.get(source, []))
            shares = [(step, value / per_step[step]) for step, value in points if per_step.get(step, 0.0) > 0.0]
            if shares:
                tactics.add(f"{name.replace('_', ' ')}, held-out {source} (greedy)", shares, marker=True)
    # whole games searched to the end (game.value_weight's count): the share of valued turns that kept the value
    values = Panel("whole games: moves that kept the position's value (exact)", ylim=(-0.02, 1.02))
    for key in sorted({key for values in metrics.values() for key in values if key.startswith("value/kept/")}):
        values.add(key.split("/")[-1], _series(metrics, key))
    return [signal, collapse, per_case, tactics, values]


def _level(metrics: Steps, key: str, value: float) -> list[tuple[int, float]]:
    """A warning threshold drawn as a flat line over the steps that logged ``key``."""
    return [(step, value) for step, _ in _series(metrics, key)]


def sft_panels(metrics: Steps) -> list[Panel]:
    """The SFT curves: loss on the training batches and the validation set, learning rate, gradient norm."""
    loss = Panel("loss")
    loss.add("train", _series(metrics, "train/loss"))
    loss.add("validation", _series(metrics, "val/loss"), marker=True)
    lr = Panel("learning rate")
    lr.add("lr", _series(metrics, "train/lr"))
    grad = Panel("gradient norm")
    grad.add("grad_norm", _series(metrics, "train/grad_norm"))
    return [loss, lr, grad]


def key_panels(metrics: Steps, samples: Steps, keys: list[str]) -> list[Panel]:
    """One panel per extra metric key (verl's name, or a sample-log statistic such as ``legal_rate``)."""
    panels = []
    for key in keys:
        panel = Panel(key)
        panel.add(key, _series(metrics, key) or _series(samples, key))
        if panel.empty:
            known = sorted({k for values in metrics.values() for k in values} | {k for v in samples.values() for k in v})
            raise ValueError(f"--keys: no values for {key!r} in the run (known keys include: "
                             f"{', '.join(known[:30])}{' ...' if len(known) > 30 else ''})")
        panels.append(panel)
    return panels


def _smooth(points: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    if window <= 1 or len(points) < window:
        return points
    values = [v for _, v in points]
    return [(points[i][0], sum(values[i - window + 1:i + 1]) / window) for i in range(window - 1, len(points))]


def render(panels: list[Panel], title: str, out_png: Path, smooth: int = 1) -> None:
    """Draw the non-empty panels on one figure (matplotlib, no display needed)."""
    from matplotlib.ticker import MaxNLocator

    panels = [p for p in panels if not p.empty]
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    with png_figure(out_png, rows, cols, (5.2 * cols, 3.6 * rows), title) as (_, axes):
        for ax, panel in zip(axes.flat, panels):
            for label, points in panel.lines.items():
                xs, ys = zip(*points)
                if smooth > 1 and len(points) >= smooth:
                    line, = ax.plot(xs, ys, alpha=0.3, linewidth=1)
                    sx, sy = zip(*_smooth(points, smooth))
                    ax.plot(sx, sy, color=line.get_color(), linewidth=1.8, label=f"{label} ({smooth}-step mean)")
                else:
                    ax.plot(xs, ys, linewidth=1.5, label=label)
            for label, points in panel.markers.items():
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=4, linestyle="--", linewidth=1, label=label)
            ax.set_title(panel.title, fontsize=10)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if panel.ylim:
                ax.set_ylim(*panel.ylim)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-ext plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", type=Path, help="verl metrics JSONL (or console .log) files, in order")
    parser.add_argument("--out", type=Path, required=True, help="folder for <name>_curves.png and .json")
    parser.add_argument("--name", default=None, help="file name stem (default: grpo or sft, from the metrics)")
    parser.add_argument("--title", default=None, help="figure title (default: the first file's name)")
    parser.add_argument("--kind", choices=("auto", "grpo", "sft"), default="auto")
    parser.add_argument("--keys", default="", help="comma list of extra metric keys to plot, one panel each")
    parser.add_argument("--smooth", type=int, default=1, help="also draw an N-step moving mean of each line")
    parser.add_argument("--samples-per-step", type=int, default=None,
                        help="samples scored per step (TRAIN_BATCH_SIZE x ROLLOUT_N; default: inferred)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console entry (``verl-ext plot``): 0 on success, 2 on bad input."""
    args = build_parser().parse_args(argv)
    missing = [str(p) for p in args.metrics if not p.is_file()]
    if missing:
        print(f"verl-ext plot: no such metrics file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.smooth < 1:
        print(f"verl-ext plot: --smooth must be >= 1, got {args.smooth}", file=sys.stderr)
        return 2
    try:
        metrics, samples = read_runs(args.metrics, args.samples_per_step)
    except ValueError as err:
        print(f"verl-ext plot: {err}", file=sys.stderr)
        return 2
    kind = args.kind
    if kind == "auto":
        has = {key for values in metrics.values() for key in values}
        kind = "sft" if "train/loss" in has else "grpo" if ("critic/score/mean" in has or samples) else ""
    if not kind:
        print(f"verl-ext plot: {args.metrics[0]} holds neither GRPO (critic/score/mean) nor SFT (train/loss) "
              "metrics; pick --kind or --keys", file=sys.stderr)
        return 2
    panels = sft_panels(metrics) if kind == "sft" else grpo_panels(metrics, samples)
    try:
        panels += key_panels(metrics, samples, [k.strip() for k in args.keys.split(",") if k.strip()])
    except ValueError as err:
        print(f"verl-ext plot: {err}", file=sys.stderr)
        return 2
    if all(p.empty for p in panels):
        print(f"verl-ext plot: no {kind} metrics to plot in {', '.join(map(str, args.metrics))}", file=sys.stderr)
        return 2
    name = args.name or kind
    png, data = args.out / f"{name}_curves.png", args.out / f"{name}_curves.json"
    render(panels, args.title or args.metrics[0].name, png, args.smooth)
    series = {p.title: {"lines": p.lines, "markers": p.markers} for p in panels if not p.empty}
    data.write_text(json.dumps({"kind": kind, "sources": [str(p) for p in args.metrics], "panels": series},
                               indent=1))
    print(f"wrote {png} and {data} ({len(metrics)} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
