"""Board text a small model's tokenizer can read cell by cell (``openspiel.board_text``).

OpenSpiel prints tic_tac_toe and connect_four as rows of unspaced cells (``.xooxx.``). BPE tokenizers merge such
runs into tokens of varying width (SmolLM2: ``.``, ``x``, ``oo``, ``xx``, ``.``), so which column a cell is in
has to be counted out of merged tokens. ``grid`` spaces the cells (one token each) and numbers the rows and
columns as OpenSpiel's move names do (tic_tac_toe ``x(row,col)``, connect_four ``o<col>``, row 0 at the top as
printed). Only the text changes: positions, moves and scores are the same in both styles.
"""

from __future__ import annotations

BOARD_TEXTS = ("raw", "grid")
# Single-digit row and column numbers keep every label one token wide.
MAX_GRID_SIDE = 10


def grid_board(text: str) -> str | None:
    """``text`` (OpenSpiel's board string) with spaced cells and row/column numbers, or None when it is not a
    rectangle of single-character cells of at most ``MAX_GRID_SIDE`` rows and columns (then show it as is)."""
    rows = text.strip("\n").split("\n")
    widths = {len(row) for row in rows}
    if len(rows) < 2 or len(widths) != 1 or any(" " in row or "\t" in row for row in rows):
        return None
    width = widths.pop()
    if not 2 <= width <= MAX_GRID_SIDE or len(rows) > MAX_GRID_SIDE:
        return None
    header = "  " + " ".join(str(column) for column in range(width))
    return "\n".join([header] + [f"{index} " + " ".join(row) for index, row in enumerate(rows)])


def render_board(text: str, style: str) -> str:
    """OpenSpiel's board string in ``style`` (one of ``BOARD_TEXTS``); ``grid`` falls back to the text as is
    for boards that are not simple grids."""
    if style == "grid":
        return grid_board(text) or text
    return text
