"""bench/learning/win_lines.py: held-out wins taken, split by the line the winning move completes."""

from __future__ import annotations

import gzip
import json

import pyspiel

from bench_scripts import load_bench_script
from verl_ext.envs.tactics import one_ply
from verl_ext.mixture import EnvMixture

win_lines = load_bench_script("win_lines")
SETTINGS = dict(held_out_share=0.2, val_tasks_per_case=40, num_tasks_per_case=200)


def _position(case: str, *actions: int) -> str:
    state = pyspiel.load_game(case).new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state.serialize()


def test_the_line_a_winning_move_completes():
    # tic_tac_toe: x at 0 and 1 wins at 2 along the top row; x at 0 and 3 wins at 6 down the left column
    assert win_lines.winning_line("tic_tac_toe", _position("tic_tac_toe", 0, 4, 1, 5), 2) == "horizontal"
    assert win_lines.winning_line("tic_tac_toe", _position("tic_tac_toe", 0, 1, 3, 2), 6) == "vertical"
    assert win_lines.winning_line("tic_tac_toe", _position("tic_tac_toe", 0, 1, 4, 2), 8) == "diagonal"
    # connect_four: three x stacked in column 0 (o plays column 1): the drop in column 0 wins vertically
    stacked = _position("connect_four", 0, 1, 0, 1, 0, 1)
    assert win_lines.winning_line("connect_four", stacked, 0) == "vertical"
    flat = _position("connect_four", 0, 0, 1, 1, 2, 2)  # x along the bottom row 0-2, o on top of it
    assert win_lines.winning_line("connect_four", flat, 3) == "horizontal"
    assert win_lines.winning_line("connect_four", flat, 6) == "?"


def _log_rows(mixture: EnvMixture, taken_every: int) -> list[dict]:
    rows = []
    for ref in mixture.plan("val"):
        tactic = one_ply(ref.case, mixture.build(ref).state)
        if tactic is not None and tactic.win_available:
            rows.append({"split": "val", "block": 1, "case": ref.case, "seed": ref.seed, "win_chance": 1.0,
                         "win_taken": float(len(rows) % taken_every == 0)})
    return rows


def test_a_pass_is_split_by_line_and_the_run_settings_are_checked(tmp_path, capsys):
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 200, "seed": 0},
                          "held_out_share": 0.2, "val_tasks_per_case": 40})
    rows = _log_rows(mixture, taken_every=2)
    assert rows, "the held-out plan has positions with a win on the board"
    log = tmp_path / "run.samples.jsonl.gz"
    with gzip.open(log, "wt") as out:
        for row in rows + [{"split": "val", "block": 1, "case": "tic_tac_toe", "seed": 7, "win_chance": 0.0}]:
            out.write(json.dumps(row) + "\n")
    args = [str(log), "--test-freq", "20", "--held-out-share", "0.2", "--val-tasks-per-case", "40",
            "--num-tasks-per-case", "200", "--out", str(tmp_path / "lines")]
    assert win_lines.main(args) == 0
    records = json.loads((tmp_path / "lines.json").read_text())
    assert [(r["step"], r["case"]) for r in records] == [(0, "tic_tac_toe")]
    lines = records[0]["lines"]
    assert sum(v["chances"] for v in lines.values()) == len(rows)  # a position without a win is not counted
    assert sum(v["taken"] for v in lines.values()) == sum(int(r["win_taken"]) for r in rows)
    assert set(lines) <= {"horizontal", "vertical", "diagonal", "several"}
    assert capsys.readouterr().out == (tmp_path / "lines.md").read_text()
    # other settings rebuild other positions: refused by name, nothing written
    assert win_lines.main([str(log), "--test-freq", "20", "--num-tasks-per-case", "200",
                           "--val-tasks-per-case", "40", "--held-out-share", "0.3"]) == 2
    assert "pass the run's env settings" in capsys.readouterr().err
