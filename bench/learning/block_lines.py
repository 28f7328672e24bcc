"""Which connect_four threats a GRPO policy blocks in its training games, by the line the threat would complete.

``tactic_pay.py`` counts games; this looks at single turns, in the games whose text the sample log kept
(``VERL_EXT_SAMPLE_TEXTS`` per step). Each such turn shows the board. The script rebuilds the position in OpenSpiel
from the board text, then finds the one-ply threat (``verl_ext.envs.tactics.one_ply``: some moves let the opponent
win at once, some do not). It classifies the threat by the line the opponent's winning reply would complete:
vertical (a column), horizontal (a row), diagonal, or several. It records whether the reply blocked it.

OpenSpiel prints the board row by row (with ``openspiel.board_text`` grid, columns or lines the rows are numbered and
spaced, and this reads them too). A horizontal line is therefore a run of characters on one line of the
prompt, and a vertical one is the same character at the same offset on consecutive lines. A small model may read
one and not the other (``win_lines.py`` found this for wins on held-out single moves).

Logs written before 2026-11-29 (commit after 53949b5) kept each step's first games scored, its shortest, so there
the kept games over-represent quick losses, i.e. missed blocks (``docs/training.md``, the sample log); later logs keep
an even spread of the step's games (``verl_ext/sample_log.py``).

The first turn of each game is not in the log: the reply starts after the prompt. A turn that follows a rejected
reply is skipped. Reads the run's sample log (plain or gzipped); needs no GPU and no model:

    python bench/learning/block_lines.py runs/x/logs/grpo-*.samples.jsonl.gz [--window 30] \\
        [--out docs/runs/X/block_lines]
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyspiel

# beside this script
from game_log_report import board_rows as shown_board
from game_log_report import report_main, shown_turns, training_games, window_start
from win_lines import lines_through

from verl_ext.envs.board_text import LINE_LENGTHS
from verl_ext.envs.openspiel_rules import load_game
from verl_ext.envs.tactics import one_ply

CASE = "connect_four"
ROWS, COLUMNS = 6, 7
MARKS = ("x", "o")  # player 0, player 1 in OpenSpiel's board text
LINES = ("vertical", "horizontal", "diagonal", "several")


def board_rows(message: str) -> list[str] | None:
    """The connect_four board's rows (top first, OpenSpiel's unspaced cells) in a prompt drawn raw or as a grid."""
    return shown_board(message, ROWS, COLUMNS)


_ANSWER = re.compile(r"<answer>\s*x?o?(\d)\s*</answer>")


def history_of(board: list[str], to_move: int) -> list[int] | None:
    """A move order (columns) that reaches ``board`` (rows top first) with ``to_move`` to play, or None when no
    legal order does. Any order serves: a position before the game's end holds no finished line."""
    columns = ["".join(board[row][col] for row in range(ROWS - 1, -1, -1)) for col in range(COLUMNS)]
    if any("." in column.rstrip(".") for column in columns):  # a piece above an empty cell
        return None
    stacks = [list(column.rstrip(".")) for column in columns]
    counts = [sum(col.count(mark) for col in stacks) for mark in MARKS]
    if counts[0] - counts[1] != to_move:
        return None
    heights = [0] * COLUMNS
    order: list[int] = []

    def place(player: int) -> bool:
        if len(order) == counts[0] + counts[1]:
            return True
        for col in range(COLUMNS):
            if heights[col] < len(stacks[col]) and stacks[col][heights[col]] == MARKS[player]:
                heights[col] += 1
                order.append(col)
                if place(1 - player):
                    return True
                heights[col] -= 1
                order.pop()
        return False

    return order if place(0) else None


def _line_of(state: pyspiel.State, col: int, mark: str) -> set[str]:
    """The directions of the four-in-a-row of ``mark`` through the top piece of ``col`` on a finished board."""
    rows = str(state).strip().splitlines()[-ROWS:]
    row = next(r for r in range(ROWS) if rows[r][col] != ".")
    return set(lines_through(rows, row, col, mark, LINE_LENGTHS[CASE]))


def threat_line(state: pyspiel.State, losing: frozenset[int]) -> str:
    """The kind of line the opponent would complete after the mover's losing moves: one of ``LINES``."""
    opponent_mark = MARKS[1 - state.current_player()]
    directions: set[str] = set()
    for move in losing:
        after = state.clone()
        after.apply_action(move)
        for reply in after.legal_actions():
            answered = after.clone()
            answered.apply_action(reply)
            if answered.is_terminal() and answered.returns()[1 - state.current_player()] > 0:
                directions |= _line_of(answered, reply, opponent_mark)
    return directions.pop() if len(directions) == 1 else "several"


def turns_of(reply: str) -> list[tuple[list[str], int, int | None]]:
    """(board rows, seat, the column answered or None) for each turn of the reply that shows a board and whose
    answer was not followed by a rejection."""
    turns = []
    for message, seat, answer_text in shown_turns(reply):
        board = board_rows(message)
        if not board:
            continue
        answer = _ANSWER.search(answer_text) if answer_text is not None else None
        turns.append((board, seat, int(answer.group(1)) if answer else None))
    return turns


GAMES = "games"  # the table's key for (window start, GAMES): how the kept games compare with all of them


def tally(path: Path, window: int) -> dict[tuple[int, str], list[int]]:
    """{(window start, line): [threats, blocked]} over the kept connect_four training replies of the log, and
    {(window start, GAMES): [kept games, their moves, all games, their moves]}: whether the kept games are like
    all of them (logs before 2026-11-29 kept each step's shortest)."""
    table: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    game = load_game(CASE)
    for row in training_games(path, (CASE,)):
        if row.get("case") != CASE:
            continue
        start = window_start(row, window)
        games = table.setdefault((start, GAMES), [0, 0, 0, 0])
        moves = int(row.get("game_moves") or 0)
        games[2:] = [games[2] + 1, games[3] + moves]
        if not row.get("reply"):
            continue
        games[:2] = [games[0] + 1, games[1] + moves]
        for board, seat, column in turns_of(str(row.get("reply") or "")):
            order = history_of(board, seat)
            if order is None:
                continue
            state = game.new_initial_state()
            for move in order:
                state.apply_action(move)
            tactics = one_ply(CASE, state.serialize())
            if tactics is None or not tactics.must_block:
                continue
            cell = table[(start, threat_line(state, tactics.losing))]
            cell[0] += 1
            cell[1] += int(column is not None and column in tactics.legal and column not in tactics.losing)
    return table


def rows_of(table: dict[tuple[int, str], list[int]], window: int) -> list[dict[str, Any]]:
    rows = []
    for start in sorted({s for s, line in table if line != GAMES or table[(s, GAMES)][0]}):
        row: dict[str, Any] = {"steps": f"{start}-{start + window - 1}"}
        for line in LINES:
            threats, blocked = table.get((start, line), [0, 0])
            row[line] = {"threats": threats, "blocked": blocked, "rate": blocked / threats if threats else None}
        kept, kept_moves, every, moves = table.get((start, GAMES), [0, 0, 0, 0])
        row[GAMES] = {"kept": kept, "kept_mean_moves": kept_moves / kept if kept else None,
                      "all": every, "all_mean_moves": moves / every if every else None}
        rows.append(row)
    return rows


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| steps | " + " | ".join(f"{line}: blocked / threats" for line in LINES)
             + " | kept games (mean moves) | all games (mean moves) |",
             "|---" * (3 + len(LINES)) + "|"]
    for row in rows:
        cells = [f"{row[line]['blocked']} / {row[line]['threats']}"
                 + (f" ({100 * row[line]['rate']:.0f} %)" if row[line]["rate"] is not None else "") for line in LINES]
        games = row[GAMES]
        cells += [f"{games['kept']} ({_mean(games['kept_mean_moves'])})",
                  f"{games['all']} ({_mean(games['all_mean_moves'])})"]
        lines.append(f"| {row['steps']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, __doc__, 30, lambda log, window: rows_of(tally(log, window), window), markdown,
                       "no kept connect_four training reply")


if __name__ == "__main__":
    raise SystemExit(main())
