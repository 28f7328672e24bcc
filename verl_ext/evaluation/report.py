"""Outputs of an evaluation: ``results.json``, ``results.md`` (tables) and ``results.png`` (side-by-side plot)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SUITE_TITLES = {"single_move": "Held-out single-move tasks", "arena": "Full games against OpenSpiel bots",
                "logic": "Held-out logic puzzles (reasoning-gym)",
                "exploitability": "Exploitability in small poker games (OpenSpiel)"}


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(results: dict[str, Any], path: Path) -> None:
    """Fixed key order (models in the order given) and indentation: the same results give the same bytes."""
    _atomic_write(path, (json.dumps(results, indent=2) + "\n").encode())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def rate_text(prop: dict[str, Any] | None) -> str:
    """``61.9 [55.5, 67.9]``: a rate in percent with its Wilson interval (``stats.proportion``); '-' without one."""
    if not prop or prop.get("rate") is None:
        return "-"
    return f"{_pct(prop['rate'])} [{_pct(prop['ci_low'])}, {_pct(prop['ci_high'])}]"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def score_text(mean: dict[str, Any] | None) -> str:
    """``0.812 [0.789, 0.836]``: a mean in [0, 1] with its interval (``stats.mean_interval``); the mean alone
    without one, '-' without a mean."""
    if not mean or mean.get("mean") is None:
        return "-"
    if mean.get("ci_low") is None:
        return _num(mean["mean"])
    return f"{mean['mean']:.3f} [{mean['ci_low']:.3f}, {mean['ci_high']:.3f}]"


def _engine(single: dict[str, Any]) -> str:
    """The engine score with its interval (results written before the interval show the mean alone)."""
    ci = single.get("engine_score_ci") or {}
    if single.get("engine_score") is None or ci.get("ci_low") is None:
        return _num(single.get("engine_score"))
    return score_text({**ci, "mean": single["engine_score"]})


def change_text(mean: dict[str, Any] | None) -> str:
    """``+0.123 [+0.045, +0.201]``; results written before the arena had ``mean_return`` show '-'."""
    if not mean or mean.get("mean") is None:
        return "-"
    if mean.get("ci_low") is None:
        return f"{mean['mean']:+.3f}"
    return f"{mean['mean']:+.3f} [{mean['ci_low']:+.3f}, {mean['ci_high']:+.3f}]"


def wdl_text(counts: dict[str, int]) -> str:
    """Game counts ``{"win": W, "draw": D, "loss": L}`` as ``W/D/L``."""
    return f"{counts['win']}/{counts['draw']}/{counts['loss']}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return out


def _sig(value: float | None) -> str:
    """Four significant digits (exploitability spans 1e-5 to 5 chips)."""
    return "-" if value is None else f"{value:.4g}"


def _exploitability_lines(results: dict[str, Any]) -> list[str]:
    """One row per poker case: the references, then each model's exploitability and exact values."""
    reference = results.get("exploitability_reference")
    if not reference:
        return []
    names = _models_with(results, "exploitability")
    cfr = f"{reference['cfr_solver'].upper()} x{reference['cfr_iterations']}"
    dtype = f" in {reference['scoring_dtype']}" if reference.get("scoring_dtype") else ""
    lines = [f"## {SUITE_TITLES['exploitability']}", "",
             "Exploitability = NashConv / 2: what a best response wins against the policy, averaged over the two "
             "seats (chips per hand; 0 at a Nash equilibrium). A model's policy at each information state is the "
             f"softmax over the legal moves of log P(<answer>MOVE</answer> | prompt), teacher-forced{dtype}. "
             "vs random / vs CFR = the model's exact expected chips per hand against that policy, seats averaged.",
             ""]
    header = ["case", "info states", "uniform random", cfr]
    header += [f"{m}: {k}" for m in names for k in ("exploitability", "vs random", "vs CFR")]
    rows = []
    for case, ref in reference["cases"].items():
        row = [case, str(ref["info_states"]), _sig(ref["uniform_random"]["exploitability"]),
               _sig(ref["cfr"]["exploitability"])]
        for m in names:
            r = results["models"][m]["exploitability"]
            c = r.get("cases", {}).get(case)
            row += ["-", "-", "-"] if c is None else [_sig(c["exploitability"]), f"{c['value_vs_uniform_random']:+.3f}",
                                                      f"{c['value_vs_cfr']:+.3f}"]
        rows.append(row)
    lines += _table(header, rows)
    for m in names:
        if results["models"][m]["exploitability"].get("skipped"):
            lines.append(f"\n{m}: {results['models'][m]['exploitability']['skipped']}.")
    for case, reason in reference.get("skipped", {}).items():
        lines.append(f"\nSkipped {case}: {reason}.")
    return lines + [""]


def _models_with(results: dict[str, Any], suite: str) -> list[str]:
    return [name for name, model in results["models"].items() if model.get(suite) is not None]


def _favourite(favourite: dict[str, Any] | None) -> str:
    return "-" if not favourite else f"{favourite['move']} {_pct(favourite['share'])}"


def _fixed_move_lines(baselines: dict[str, Any]) -> list[str]:
    """The fixed-move line under the single-move table: what always playing one move scores on these positions."""
    if not baselines:
        return []
    parts = [f"{case} {b['best_fixed_move']} {_num(b['best_fixed_score'])} (random mover {_num(b['random_mover'])})"
             for case, b in baselines.items()]
    lines = ["Fixed-move line (the engine score of always playing the best single move on these positions; a model "
             "at or below it has learnt a favourite, not the positions): " + "; ".join(parts) + ".", ""]
    tactical = [f"{case} {_num(b['tactics_line'])} ({b['win_positions']} positions with a win on the board, "
                f"{b['block_positions']} that need a block)"
                for case, b in baselines.items() if b.get("tactics_line") is not None]
    if tactical:
        lines += ["Tactics line (the engine score of a player that knows only one-ply tactics: a random winning "
                  "move, else a random move that does not let the opponent win at once): " + "; ".join(tactical)
                  + ".", ""]
    return lines


def _paired_lines(paired: dict[str, Any], confidence: float) -> list[str]:
    """Each model's engine score minus the baseline's on the same positions (paired.py)."""
    if not paired.get("models"):
        return []
    baseline = paired["baseline"]
    rows = [[name, case, str(c["positions"]), change_text(c["change"]), str(c["better"]), str(c["worse"])]
            for name, cases in paired["models"].items() for case, c in cases.items()]
    return ([f"Change from {baseline} on the same positions (engine score, position by position; the paired "
             f"interval is tighter than the two models' own):", ""]
            + _table(["model", "case", "positions", f"change from {baseline} [{int(round(100 * confidence))} %]",
                      "better", "worse"], rows)
            + [""])


def _tactics_table(results: dict[str, Any], names: list[str]) -> list[str]:
    """Per case with one-ply tactics, each model's share of wins taken and of threats blocked."""
    first = results["models"][names[0]]["single_move"]["cases"]
    cases = [case for case, r in first.items() if "tactics" in r]
    if not cases:
        return []
    header = ["case"] + [f"{m}: {k}" for m in names
                         for k in ("took the win", "blocked", "engine, win or block", "engine, elsewhere")]
    rows = []
    for case in cases:
        row = [case]
        for m in names:
            tactics = results["models"][m]["single_move"]["cases"][case]["tactics"]
            row += [rate_text(tactics["win_taken"]), rate_text(tactics["blocked"])]
            row += [score_text(tactics.get(k)) for k in ("engine_where_tactical", "engine_elsewhere")]  # older: -
        rows.append(row)
    return (["One-ply tactics: where a move wins at once, the share of replies that play a winning move; where "
             "the opponent threatens to win at once (and no win is on the board), the share that avoid every move "
             "letting it win; the engine score on the positions with a win or a block (what "
             "`train_positions=tactical` trains on) and on the rest.", ""] + _table(header, rows) + [""])


def markdown(results: dict[str, Any]) -> str:
    """Tables per suite: one row per case (per opponent in the arena), models side by side."""
    settings = results["settings"]
    lines = ["# verl-ext evaluation", "",
             f"Models: {', '.join(results['models'])}. Seed {settings['seed']}; rates in %, "
             f"[{int(round(100 * settings['confidence']))}% Wilson interval].", ""]
    names = _models_with(results, "single_move")
    if names:
        title = SUITE_TITLES["single_move"]
        if settings.get("positions") == "training":
            title = "Single-move tasks on training positions (in sample, not held out)"
        lines += [f"## {title}", "",
                  "legal = legal-move rate, format = well-formed answer rate, engine = mean engine-shaped score "
                  "(illegal = 0) [its normal interval], favourite = the move of most legal replies and its share "
                  "of them.", ""]
        header = ["case", "n"] + [f"{m}: {k}" for m in names for k in ("legal", "format", "engine", "favourite")]
        first = results["models"][names[0]]["single_move"]
        rows = []
        for case in [*first["cases"], None]:
            label = "**all**" if case is None else case
            row = [label, str((first["overall"] if case is None else first["cases"][case])["n"])]
            for m in names:
                r = results["models"][m]["single_move"]
                r = r["overall"] if case is None else r["cases"][case]
                row += [rate_text(r["legal"]), _pct(r["format"]["rate"]), _engine(r)]
                if case is not None:
                    row.append(_favourite(r.get("favourite")))
                else:
                    row.append("")
            rows.append(row)
        lines += _table(header, rows) + [""]
        lines += _fixed_move_lines(results.get("single_move_baseline") or {})
        lines += _paired_lines(results.get("single_move_paired") or {}, settings["confidence"])
        lines += _tactics_table(results, names)
    names = _models_with(results, "arena")
    if names:
        lines += [f"## {SUITE_TITLES['arena']}", "",
                  f"Seats alternate; {settings['games_per_case']} games per case and opponent. W/D/L = wins/draws/"
                  "losses, win % with its interval; forfeits (illegal or unparseable moves) count as losses; in "
                  "brackets the share of all the model's replies that were rejected (illegal or unparseable). "
                  "return = the model seat's mean return in the game's units (chips; Hanabi: the team score) with "
                  "its normal 95 % interval; a forfeit pays the game's lowest return. Opponent self: the model in "
                  "every seat.", ""]
        header = ["case", "opponent"] + [f"{m}: {k}" for m in names
                                         for k in ("W/D/L", "win %", "return", "forfeits")]
        first = results["models"][names[0]]["arena"]
        rows = []
        for i, match in enumerate(first["matches"]):
            row = [match["case"], match["opponent"]]
            for m in names:
                r = results["models"][m]["arena"]["matches"][i]
                replies = r["model_moves"] + r["rejected_replies"]
                rejected = f" ({_pct(r['rejected_replies'] / replies)} %)" if replies else ""
                row += [f"{r['win']['k']}/{r['draw']['k']}/{r['loss']['k']}", rate_text(r["win"]),
                        change_text(r.get("mean_return")), f"{r['forfeit']['k']}{rejected}"]
            rows.append(row)
        lines += _table(header, rows)
        lines += _seat_lines(results, names)
        lines += _game_tactics_lines(results, names)
        for skip in first["skipped"]:
            lines.append(f"\nSkipped {skip['case']} vs {skip['opponent']}: {skip['reason']}.")
        lines.append("")
        lines += _rejection_lines(results, names)
    names = _models_with(results, "logic")
    if names:
        lines += [f"## {SUITE_TITLES['logic']}", "", "accuracy = answers the dataset scores as correct.", ""]
        header = ["dataset", "n"] + [f"{m}: {k}" for m in names for k in ("accuracy", "format")]
        first = results["models"][names[0]]["logic"]
        rows = []
        for case in [*first["cases"], None]:
            label = "**all**" if case is None else case
            row = [label, str((first["overall"] if case is None else first["cases"][case])["n"])]
            for m in names:
                r = results["models"][m]["logic"]
                r = r["overall"] if case is None else r["cases"][case]
                row += [rate_text(r["accuracy"]), _pct(r["format"]["rate"])]
            rows.append(row)
        lines += _table(header, rows) + [""]
    lines += _exploitability_lines(results)
    return "\n".join(lines)


def _seat_lines(results: dict[str, Any], names: list[str]) -> list[str]:
    """The arena's W/D/L by the model's seat (seat 0 moves first), per match and model: where a player is weak
    (a second seat losing what the first wins) hides in the totals. Empty for results written without seats."""
    first = results["models"][names[0]]["arena"]["matches"]
    if not first or not all(m.get("by_seat") for n in names for m in results["models"][n]["arena"]["matches"]):
        return []
    rows = []
    for i, match in enumerate(first):
        row = [match["case"], match["opponent"]]
        for m in names:
            seats = results["models"][m]["arena"]["matches"][i]["by_seat"]
            row.append(" · ".join(f"{seat}: {wdl_text(c)}"
                                  for seat, c in sorted(seats.items(), key=lambda item: int(item[0]))))
        rows.append(row)
    return ["", "By the model's seat (0 moves first), W/D/L:", ""] + _table(
        ["case", "opponent"] + [f"{m}: by seat" for m in names], rows)


def _game_tactics_lines(results: dict[str, Any], names: list[str]) -> list[str]:
    """Per match with one-ply tactics, each model's wins taken and threats blocked over its game turns, and the
    share of its moves that kept the value where any match was valued exactly. Empty for results without them
    (written before they were counted, or games without such tactics)."""
    first = results["models"][names[0]]["arena"]["matches"]
    every = [results["models"][m]["arena"]["matches"][i].get("tactics") or {} for m in names for i in range(len(first))]
    valued = any(t.get("value_kept") for t in every)  # results of games searched to the end (older: none)
    keys = ("win_taken", "blocked") + (("value_kept",) if valued else ())
    columns = ("took the win", "blocked") + (("kept the value",) if valued else ())
    rows = []
    for i, match in enumerate(first):
        per_model = [results["models"][m]["arena"]["matches"][i].get("tactics") for m in names]
        if not any(per_model):
            continue
        row = [match["case"], match["opponent"]]
        for tactics in per_model:
            tactics = tactics or {}
            row += [rate_text(tactics.get(k)) for k in keys]
        rows.append(row)
    if not rows:
        return []
    header = ["case", "opponent"] + [f"{m}: {k}" for m in names for k in columns]
    value_note = (" In games small enough to search to the end, the share of its moves that kept the position's value "
                  "under best play." if "value_kept" in keys else "")
    return ["", "One-ply tactics in the games: of the model's turns with a win on the board, the share it took; of "
            "those where the opponent threatened to win at once, the share it blocked (a forfeited turn counts as "
            f"missed).{value_note}", ""] + _table(header, rows)


def _rejection_lines(results: dict[str, Any], names: list[str]) -> list[str]:
    """Per model and match with rejected replies: why, how many repeated the answer rejected just before at the
    same turn (after the correction), and one rejected answer beside the legal moves it was rejected against."""
    lines = []
    for m in names:
        for r in results["models"][m]["arena"]["matches"]:
            rejections = r.get("rejections") or {}
            if not rejections.get("replies"):
                continue
            reasons = ", ".join(f"{reason} {n}" for reason, n in rejections["reasons"].items())
            line = (f"- {m}, {r['case']} vs {r['opponent']}: {rejections['replies']} rejected replies ({reasons}), "
                    f"{rejections['repeated_after_correction']} of them repeating the answer rejected just before")
            example = next((e for e in rejections["examples"] if e["answer"] is not None), None)
            if example is not None:
                line += (f"; e.g. `{example['answer']}` at move {example['move']} when the legal moves were "
                         f"{', '.join(example['legal_moves'])}")
            lines.append(line)
    if not lines:
        return []
    return ["Rejected replies (illegal or unparseable; each retry follows a correction that lists the legal moves):",
            "", *lines, ""]


def _short(case: str, limit: int = 28) -> str:
    return case if len(case) <= limit else case[: limit - 1] + "…"


def plot(results: dict[str, Any], path: Path) -> None:
    """Grouped bars per panel (single-move legal rate and engine score, arena win rate, logic accuracy; poker
    exploitability on a log scale beside its references), one colour per model, Wilson intervals as error bars."""
    import numpy as np

    from ..figure import png_figure

    # (title, x labels, {series: [(height, error below, error above)]}, log scale)
    panels: list[tuple[str, list[str], dict[str, list[tuple[float, float, float]]], bool]] = []

    def collect(suite: str, title: str, items: list[tuple[str, Any]]) -> None:
        names = _models_with(results, suite)
        if not names or not items:
            return
        values = {m: [getter(results["models"][m][suite]) for _, getter in items] for m in names}
        panels.append((title, [label for label, _ in items], values, False))

    def prop(getter: Any) -> Any:
        def get(suite_result: dict[str, Any]) -> tuple[float, float, float]:
            p = getter(suite_result)
            rate = p["rate"] or 0.0
            return rate, max(0.0, rate - p["ci_low"]), max(0.0, p["ci_high"] - rate)
        return get

    def plain(getter: Any) -> Any:
        return lambda r: ((getter(r) or 0.0), 0.0, 0.0)

    first = next((m for m in results["models"].values() if m.get("single_move")), None)
    if first:
        cases = list(first["single_move"]["cases"])
        collect("single_move", "single-move: legal-move rate",
                [(_short(c), prop(lambda r, c=c: r["cases"][c]["legal"])) for c in cases])
        collect("single_move", "single-move: engine-shaped score",
                [(_short(c), plain(lambda r, c=c: r["cases"][c]["engine_score"])) for c in cases])
    first = next((m for m in results["models"].values() if m.get("arena")), None)
    if first:
        items = [(f"{_short(x['case'], 20)}\nvs {x['opponent']}", prop(lambda r, i=i: r["matches"][i]["win"]))
                 for i, x in enumerate(first["arena"]["matches"])]
        collect("arena", "arena: win rate", items)
    first = next((m for m in results["models"].values() if m.get("logic")), None)
    if first:
        collect("logic", "logic: accuracy",
                [(_short(c), prop(lambda r, c=c: r["cases"][c]["accuracy"])) for c in first["logic"]["cases"]])
    reference = results.get("exploitability_reference")
    if reference and reference["cases"]:
        cases = list(reference["cases"])
        floor = 1e-6  # a log scale cannot show 0

        def bars(get: Any) -> list[tuple[float, float, float]]:
            return [(max(floor, get(c)) if get(c) is not None else floor, 0.0, 0.0) for c in cases]

        series = {"uniform random": bars(lambda c: reference["cases"][c]["uniform_random"]["exploitability"]),
                  f"{reference['cfr_solver'].upper()} x{reference['cfr_iterations']}":
                      bars(lambda c: reference["cases"][c]["cfr"]["exploitability"])}
        for m in _models_with(results, "exploitability"):
            r = results["models"][m]["exploitability"].get("cases", {})
            series[m] = bars(lambda c, r=r: r[c]["exploitability"] if c in r else None)
        panels.append(("exploitability (chips per hand, lower is better)", [_short(c) for c in cases], series, True))

    if not panels:
        panels.append(("no results", [], {}, False))
    size = (max(8.0, 1.2 * max(len(p[1]) for p in panels) + 3), 3.6 * len(panels))
    with png_figure(path, len(panels), 1, size, metadata={"Software": None}) as (_, axes):
        for ax, (title, labels, values, log_scale) in zip(axes[:, 0], panels):
            ax.set_title(title)
            if not labels:
                ax.text(0.5, 0.5, "no results", ha="center", va="center")
                continue
            x = np.arange(len(labels))
            width = 0.8 / max(1, len(values))
            for k, (model, triples) in enumerate(values.items()):
                heights = [t[0] for t in triples]
                errors = np.array([[t[1] for t in triples], [t[2] for t in triples]])
                ax.bar(x + (k - (len(values) - 1) / 2) * width, heights, width, label=model,
                       yerr=errors if errors.any() else None, capsize=3)
            ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
            if log_scale:
                ax.set_yscale("log")
            else:
                ax.set_ylim(0, 1.05)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def write_all(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write the three output files; returns their paths."""
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "results.md", "plot": out_dir / "results.png"}
    write_json(results, paths["json"])
    _atomic_write(paths["markdown"], markdown(results).encode())
    plot(results, paths["plot"])
    return paths
