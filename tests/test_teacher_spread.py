"""bench/learning/teacher_spread.py: the engine-move teacher plays one game per GRPO group (no signal under the
training reward), a teacher drawing within a margin plays different games with signal, and both report their
strength with intervals; the plot is drawn from the report alone."""

from __future__ import annotations

import json

from bench_scripts import load_bench_script

teacher_spread = load_bench_script("teacher_spread")


def test_a_margin_gives_groups_signal_that_the_engine_move_never_has(tmp_path):
    out, png = tmp_path / "spread.json", tmp_path / "spread.png"
    assert teacher_spread.main(["--cases", "tic_tac_toe", "--margins", "0,0.2", "--opponents", "random",
                                "--games", "12", "--groups", "8", "--n", "4", "--out", str(out),
                                "--plot", str(png)]) == 0
    report = json.loads(out.read_text())
    fixed, spread = report["results"]
    assert (fixed["margin"], spread["margin"]) == (0.0, 0.2)
    assert fixed["grpo_groups"]["groups_with_signal"] == fixed["grpo_groups"]["groups_not_all_same_game"] == 0.0
    assert spread["grpo_groups"]["groups_not_all_same_game"] > 0.5 and spread["grpo_groups"]["groups_with_signal"] > 0
    assert fixed["strength"]["random"]["mean_good_moves"] == 1.0 < spread["strength"]["random"]["mean_good_moves"]
    for result in report["results"]:
        cell = result["strength"]["random"]
        assert cell["games"] == 12 and cell["win"] + cell.get("draw", 0) + cell.get("loss", 0) == 12
        low, high = cell["win_ci"]
        assert low <= cell["win_rate"] <= high and 0.0 <= cell["keeps_exact_value"] <= 1.0
    assert report["settings"]["row_sets"] == teacher_spread.TACTICS_RUN_ROWS
    again = tmp_path / "again.png"
    assert teacher_spread.main(["--replot", str(out), "--plot", str(again)]) == 0
    assert png.stat().st_size > 10_000 and again.stat().st_size > 10_000
