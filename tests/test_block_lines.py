"""bench/learning/block_lines.py: connect_four threats in the kept game transcripts, by the line they complete."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "learning"))

import block_lines  # noqa: E402

HORIZONTAL = [".......", ".......", ".......", ".......", "xx.....", "ooo.x.."]  # o wins at column 3
VERTICAL = [".......", ".......", ".......", "......o", "x.....o", "xx....o"]  # o wins on top of column 6


def _turn(board: list[str], answer: str, seat: int = 0) -> str:
    return (f"user\nYou are playing Connect Four (connect_four()) as player {seat} of 2. It is your turn.\n"
            "Current state:\n" + "\n".join(board) + "\n\nLegal moves (write yours exactly as listed): x0, x1\n"
            f"Choose the best move for you.\nassistant\n<answer>{answer}</answer>")


def _game(step: int, *turns: str, moves: int = 9) -> dict:
    return {"split": "train", "case": "connect_four", "game": 1.0, "step": step, "game_moves": moves,
            "reply": "\n".join(["<answer>x4</answer>", *turns])}


def test_threats_are_classified_by_line_and_blocks_counted(tmp_path, capsys):
    rejected = _turn(VERTICAL, "x9") + "\nuser\nThat reply was rejected (illegal_move: x9). Legal moves: x0, x1\n" \
        "assistant\n<answer>x6</answer>"
    rows = [_game(1, _turn(HORIZONTAL, "x3")), _game(2, _turn(VERTICAL, "x0")), _game(3, rejected),
            _game(40, _turn(VERTICAL, "x6")),
            {"split": "train", "case": "tic_tac_toe", "game": 1.0, "step": 1, "reply": _turn(HORIZONTAL, "x3")},
            {"split": "val", "case": "connect_four", "game": 1.0, "reply": _turn(HORIZONTAL, "x3")},
            {"split": "train", "case": "connect_four", "game": 1.0, "step": 5, "game_moves": 21}]  # no text kept
    log = tmp_path / "run.samples.jsonl.gz"
    with gzip.open(log, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert block_lines.main([str(log), "--window", "30", "--out", str(tmp_path / "lines")]) == 0
    first, later = json.loads((tmp_path / "lines.json").read_text())
    assert first["steps"] == "1-30" and first["horizontal"] == {"threats": 1, "blocked": 1, "rate": 1.0}
    assert first["vertical"] == {"threats": 1, "blocked": 0, "rate": 0.0}  # the rejected turn is skipped
    assert later["steps"] == "31-60" and later["vertical"]["blocked"] == 1 and later["diagonal"]["threats"] == 0
    # the kept games beside all of them: a log that kept only short games shows it
    assert first["games"] == {"kept": 3, "kept_mean_moves": 9.0, "all": 4, "all_mean_moves": 12.0}
    assert "| 1-30 | 0 / 1 (0 %) | 1 / 1 (100 %) | 0 / 0 | 0 / 0 | 3 (9.0) | 4 (12.0) |" in capsys.readouterr().out


def test_a_board_no_move_order_reaches_is_left_out():
    assert block_lines.history_of(HORIZONTAL, 0) is not None
    assert block_lines.history_of(HORIZONTAL, 1) is None  # counts say player 0 is to move
    floating = [".......", ".......", ".......", ".......", "x......", "......o"]  # x cannot float over an empty cell
    assert block_lines.history_of(floating, 0) is None


def test_a_log_without_connect_four_texts_says_so(tmp_path, capsys):
    log = tmp_path / "run.samples.jsonl"
    log.write_text(json.dumps({"split": "train", "case": "tic_tac_toe", "reply": "x"}) + "\n")
    assert block_lines.main([str(log)]) == 1
    assert "no kept connect_four training reply" in capsys.readouterr().out


def test_boards_drawn_as_a_numbered_grid_are_read_as_the_raw_board():
    """openspiel.board_text grid / columns / lines (the columns arm's prompts): the same rows come back."""
    from verl_ext.envs.board_text import render_board

    for board in (HORIZONTAL, VERTICAL):
        for style in ("raw", "grid", "columns", "lines"):
            drawn = render_board("\n".join(board), style, "connect_four")
            assert block_lines.board_rows(f"Current state:\n{drawn}\n\nLegal moves: x0") == board, style
    assert block_lines.board_rows("Current state:\nno board here\n") is None
