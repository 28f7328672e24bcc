"""bench/learning/compare_runs.py: several runs' training metrics, greedy validation and exploitability curves on
one figure, with the plotted numbers in a JSON beside the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_scripts import load_bench_script

compare = load_bench_script("compare_runs")

HANABI = "hanabi(colors=2,hand_size=2,max_information_tokens=3,players=2,ranks=3)"


def write_metrics(path: Path, entropies: list[float], val: dict[int, float]) -> Path:
    """A verl metrics JSONL: actor/entropy at steps 1..n, the hanabi case's greedy validation at ``val``'s steps."""
    lines = []
    for step in sorted(set(range(1, len(entropies) + 1)) | set(val)):
        data: dict[str, float] = {}
        if 1 <= step <= len(entropies):
            data["actor/entropy"] = entropies[step - 1]
        if step in val:
            data[f"val-core/openspiel-game/{HANABI}/reward/mean@1"] = val[step]
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_curve(path: Path, points: dict[int, float]) -> Path:
    """An exploitability_curve.json of kuhn_poker (the recipe's curve stage writes this shape)."""
    curve = {"steps": sorted(points), "cases": {"kuhn_poker": {
        "uniform_random": {"exploitability": 0.4583},
        "cfr": {"exploitability": 8.7e-05, "solver": "cfr+"},
        "points": [{"step": s, "model": f"step_{s}", "exploitability": v} for s, v in sorted(points.items())]}}}
    path.write_text(json.dumps(curve))
    return path


def test_runs_validation_by_game_name_and_curves_land_in_the_json(tmp_path: Path) -> None:
    a = write_metrics(tmp_path / "a.metrics.jsonl", [0.11, 0.10, 0.09], {0: 0.17, 2: 0.02})
    b = write_metrics(tmp_path / "b.metrics.jsonl", [0.12, 0.05], {0: 0.18})
    ca = write_curve(tmp_path / "a.json", {0: 0.47, 10: 0.41, 20: 0.25})
    cb = write_curve(tmp_path / "b.json", {0: 0.47, 10: 0.32})
    out = tmp_path / "fig" / "compare.png"
    compare.main(["--out", str(out), "--run", f"KL 0.5={a}", "--run", f"KL 0.05={b}", "--keys", "actor/entropy",
                  "--val", "hanabi", "--curve", f"KL 0.5={ca}", "--curve", f"KL 0.05={cb}"])
    assert out.stat().st_size > 0
    plotted = json.loads(out.with_suffix(".json").read_text())
    assert plotted["actor/entropy"]["KL 0.5"] == [[1, 0.11], [2, 0.10], [3, 0.09]]
    assert plotted["actor/entropy"]["KL 0.05"] == [[1, 0.12], [2, 0.05]]
    # "hanabi" finds the logged case with its parameters (whose commas --val cannot carry)
    assert plotted["held-out hanabi (greedy)"]["KL 0.5"] == [[0, 0.17], [2, 0.02]]
    curve = plotted["kuhn_poker exploitability (exact)"]
    assert curve["KL 0.5"] == [[0, 0.47], [10, 0.41], [20, 0.25]]
    assert curve["KL 0.05"] == [[0, 0.47], [10, 0.32]]
    assert curve["uniform random"] == pytest.approx(0.4583)


def test_curves_alone_need_no_metrics(tmp_path: Path) -> None:
    out = tmp_path / "curves.png"
    compare.main(["--out", str(out), "--curve", f"seed 0={write_curve(tmp_path / 'c.json', {0: 0.47, 40: 0.16})}"])
    plotted = json.loads(out.with_suffix(".json").read_text())
    assert list(plotted) == ["kuhn_poker exploitability (exact)"]


def test_a_file_that_is_no_curve_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"step": 1}))
    with pytest.raises(SystemExit):
        compare.main(["--out", str(tmp_path / "x.png"), "--curve", f"run={bad}"])
    assert f"--curve {bad}: not an exploitability_curve.json" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([], "name at least one --run or --curve"),
    (["--curve", "no-equals-sign.json"], "--curve: expected NAME=PATH"),
    (["--run", "=x.jsonl"], "--run: expected NAME=PATH"),
])
def test_bad_flags_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                       message: str) -> None:
    with pytest.raises(SystemExit):
        compare.main(["--out", str(tmp_path / "x.png"), *argv])
    assert message in capsys.readouterr().err


def test_a_mixed_runs_two_sources_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mixed run logs a case's single moves and whole games under two sources: a bare case is refused by name,
    SOURCE/CASE picks one (a run with the games alone matches it too)."""
    mixed = tmp_path / "mixed.metrics.jsonl"
    mixed.write_text("\n".join(json.dumps({"step": step, "data": {
        "val-core/openspiel/tic_tac_toe/reward/mean@1": single,
        "val-core/openspiel-game/tic_tac_toe/reward/mean@1": games}})
        for step, single, games in ((0, 1.0, 0.55), (20, 0.75, 0.63))) + "\n")
    games_only = tmp_path / "games.metrics.jsonl"
    games_only.write_text(json.dumps({"step": 0, "data": {"val-core/openspiel-game/tic_tac_toe/reward/mean@1": 0.6}})
                          + "\n")
    out = tmp_path / "compare.png"
    with pytest.raises(SystemExit):
        compare.main(["--out", str(out), "--run", f"mix={mixed}", "--keys", "", "--val", "tic_tac_toe"])
    err = capsys.readouterr().err
    assert "openspiel/tic_tac_toe" in err and "openspiel-game/tic_tac_toe" in err and "'mix'" in err
    compare.main(["--out", str(out), "--run", f"mix={mixed}", "--run", f"games={games_only}", "--keys", "",
                  "--val", "openspiel-game/tic_tac_toe"])
    plotted = json.loads(out.with_suffix(".json").read_text())["held-out openspiel-game/tic_tac_toe (greedy)"]
    assert plotted == {"mix": [[0, 0.55], [20, 0.63]], "games": [[0, 0.6]]}


def test_a_run_keeps_its_colour_in_a_panel_where_an_earlier_run_has_no_points(tmp_path: Path, monkeypatch) -> None:
    from matplotlib.axes import Axes

    drawn: list[tuple[str, str]] = []
    plot = Axes.plot

    def recording_plot(self, *args, **kwargs):
        drawn.append((kwargs.get("label"), kwargs.get("color")))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording_plot)
    a = write_metrics(tmp_path / "a.metrics.jsonl", [0.11, 0.10], {})
    b = write_metrics(tmp_path / "b.metrics.jsonl", [0.12, 0.05], {0: 0.18})
    compare.main(["--out", str(tmp_path / "c.png"), "--run", f"first={a}", "--run", f"second={b}",
                  "--keys", "actor/entropy", "--val", "hanabi"])
    # the validation panel has the second run only: it is drawn in the second run's colour, not the first's
    assert drawn == [("first", "C0"), ("second", "C1"), ("second", "C1")]
