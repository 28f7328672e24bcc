"""bench/learning/value_turns.py: it rebuilds tic_tac_toe boards from a sample log's game texts, asks the exact search
whether each reply kept the value, sorts the losses (a win left, a block missed, positional) and skips what it cannot
read (a rejected reply, an impossible board)."""

from __future__ import annotations

import json

from bench_scripts import load_bench_script

value_turns = load_bench_script("value_turns")

PROMPT = ("You are playing Tic Tac Toe (tic_tac_toe()) as player {seat} of 2. It is your turn (move {move}).\n"
          "Current state:\n{board}\n\nLegal moves (write yours exactly as listed): ...\n")


def _turn(seat: int, move: int, rows: list[str], answer: str) -> str:
    return "\nuser\n" + PROMPT.format(seat=seat, move=move, board="\n".join(rows)) + f"\nassistant\n{answer}"


def _log(tmp_path, replies: list[str]):
    path = tmp_path / "run.samples.jsonl"
    rows = [{"split": "train", "game": 1.0, "case": "tic_tac_toe", "step": 3, "reply": reply} for reply in replies]
    rows.append({"split": "train", "game": 1.0, "case": "connect_four", "step": 3, "reply": "<answer>x3</answer>"})
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def test_a_board_is_rebuilt_only_for_the_player_it_belongs_to():
    board = ["x..", "xo.", "..."]  # two x, one o: o to move
    state = value_turns.state_of(board, 1)
    assert state is not None and state.current_player() == 1 and str(state).splitlines() == board
    assert value_turns.state_of(board, 0) is None
    assert value_turns.state_of(["xxx", "oo.", "..."], 1) is None  # x has already won: no game continues from it


def test_each_lost_value_is_sorted_by_its_kind():
    miss = value_turns.state_of(["x..", "xo.", "..."], 1)
    assert value_turns.kind_of(miss, 1) == "missed a block"  # x wins at (2,0) next
    win = value_turns.state_of(["oo.", "xx.", "x.."], 1)
    assert value_turns.kind_of(win, 8) == "left a win"  # o(0,2) wins at once
    fork = value_turns.state_of(["x..", ".o.", "..x"], 1)
    assert value_turns.kind_of(fork, 2) == "positional"  # a corner lets x fork; no threat on the board
    assert 2 not in value_turns.best_actions("tic_tac_toe", fork) and 1 in value_turns.best_actions("tic_tac_toe", fork)


def test_the_report_counts_kept_and_lost_turns_by_seat_and_move(tmp_path):
    lost = "<answer>o(1,1)</answer>" + _turn(1, 4, ["x..", "xo.", "..."], "<answer>o(0,1)</answer>")
    kept = "<answer>o(1,1)</answer>" + _turn(1, 4, ["x..", "xo.", "..."], "<answer>o(2,0)</answer>")
    rejected = ("<answer>o(1,1)</answer>" + _turn(1, 4, ["x..", "xo.", "..."], "<answer>o(1,1)</answer>")
                + "\nuser\nThat reply was rejected: o(1,1) is taken.")
    out = tmp_path / "value_turns"
    assert value_turns.main([str(_log(tmp_path, [lost, kept, rejected])), "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())
    assert len(rows) == 1
    assert rows[0] | {"positional_boards": None} == {
        "steps": "1-40", "seat": 1, "move": 4, "turns": 2, "kept": 1, "left a win": 0, "missed a block": 1,
        "positional": 0, "positional_boards": None}
    assert "| 1-40 | 1 | 4 | 2 | 1 (50 %) | 0 | 1 | 0 |" in out.with_suffix(".md").read_text()


def test_boards_drawn_in_every_board_text_style_are_read(tmp_path):
    """openspiel.board_text grid / columns / lines (the lines arm's prompts, docs/runs/2026-11-30-h200x2-ttt-lines/):
    the shared reader gives back the raw rows, and the report counts those turns as it counts raw ones."""
    from verl_ext.envs.board_text import render_board

    board = ["x..", "xo.", "..."]
    for style in ("raw", "grid", "columns", "lines"):
        drawn = render_board("\n".join(board), style, "tic_tac_toe")
        reply = "<answer>o(1,1)</answer>" + _turn(1, 4, drawn.splitlines(), "<answer>o(0,1)</answer>")
        assert value_turns.turns_of(reply) == [(board, 1, 1)], style
        out = tmp_path / f"value_turns_{style}"
        assert value_turns.main([str(_log(tmp_path, [reply])), "--out", str(out)]) == 0
        assert json.loads(out.with_suffix(".json").read_text())[0]["missed a block"] == 1, style
    assert value_turns.turns_of("<answer>o(1,1)</answer>" + _turn(1, 4, ["no board"], "<answer>o(0,1)</answer>")) == []


def test_a_log_without_tic_tac_toe_texts_says_so(tmp_path, capsys):
    assert value_turns.main([str(_log(tmp_path, []))]) == 1
    assert "no kept tic_tac_toe training reply" in capsys.readouterr().out
