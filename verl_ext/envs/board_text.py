"""Board text a small model's tokenizer can read cell by cell (``openspiel.board_text``).

OpenSpiel prints tic_tac_toe and connect_four as rows of unspaced cells (``.xooxx.``). BPE tokenizers merge such
runs into tokens of varying width (SmolLM2: ``.``, ``x``, ``oo``, ``xx``, ``.``), so which column a cell is in
has to be counted out of merged tokens. ``grid`` spaces the cells (one token each) and numbers the rows and
columns as OpenSpiel's move names do (tic_tac_toe ``x(row,col)``, connect_four ``o<col>``, row 0 at the top as
printed). OpenSpiel prints a row on one line of the prompt but a column or a diagonal across several, and GRPO on
SmolLM2 taught wins along rows only (held-out horizontal wins taken 8 -> 19 of 51 at connect_four, vertical
10 -> 10 of 44; docs/runs/2026-11-27-h200x2-smollm2-split-tactical/): ``columns`` adds, below the grid, every column
on a line of its own, and ``lines`` also every diagonal long enough to hold a winning line. They cost prompt
tokens (SmolLM2, a connect_four board: raw 24, grid 69, columns 155, lines 362; tic_tac_toe 10, 22, 55, 98). Only
the text changes: positions, moves and scores are the same in every style.
"""

from __future__ import annotations

BOARD_TEXTS = ("raw", "grid", "columns", "lines")
# cells in a row that win, per game (OpenSpiel short name): the shortest diagonal ``lines`` shows; on other grids
# the diagonals as long as the board's shorter side
LINE_LENGTHS = {"tic_tac_toe": 3, "connect_four": 4}
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


def board_lines(text: str, line_length: int | None = None, diagonals: bool = True) -> str | None:
    """The grid of ``grid_board``, then each column top to bottom and (``diagonals``) each diagonal of at least
    ``line_length`` cells (default: the board's shorter side) from its top end, one per line, labelled with the
    row and column numbers the grid shows; None when ``text`` is not a grid (``grid_board``)."""
    grid = grid_board(text)
    if grid is None:
        return None
    rows = text.strip("\n").split("\n")
    height, width = len(rows), len(rows[0])
    shortest = line_length or min(height, width)
    out = [grid, "Columns, top to bottom:"]
    out += [f"column {c}: " + " ".join(row[c] for row in rows) for c in range(width)]
    found = []
    for step in ((1, -1) if diagonals else ()):  # down-right, then down-left
        starts = [(0, c) for c in range(width)] + [(r, width - 1 if step == -1 else 0) for r in range(1, height)]
        for r0, c0 in starts:
            cells = []
            r, c = r0, c0
            while 0 <= r < height and 0 <= c < width:
                cells.append((r, c))
                r, c = r + 1, c + step
            if len(cells) >= shortest:
                (ra, ca), (rb, cb) = cells[0], cells[-1]
                found.append(f"({ra},{ca})-({rb},{cb}): " + " ".join(rows[i][j] for i, j in cells))
    if found:
        out += [f"Diagonals of {shortest} or more cells, from their top end:"] + found
    return "\n".join(out)


def render_board(text: str, style: str, game: str | None = None) -> str:
    """OpenSpiel's board string in ``style`` (one of ``BOARD_TEXTS``) for ``game`` (OpenSpiel's short name: the
    length of a winning line, ``LINE_LENGTHS``); ``grid``, ``columns`` and ``lines`` fall back to the text as is for
    boards that are not simple grids."""
    if style == "grid":
        return grid_board(text) or text
    if style in ("columns", "lines"):
        return board_lines(text, LINE_LENGTHS.get(game or ""), diagonals=style == "lines") or text
    return text
