"""Where a GRPO policy loses tic_tac_toe's exact value in its training games: by seat, move and kind of mistake.

The game records count the policy's moves that kept the position's value under best play (``value/kept``); this
says which moves did not. It reads the games whose text the sample log kept (``VERL_EXT_SAMPLE_TEXTS`` per step),
rebuilds each shown board in OpenSpiel (any move order that reaches it: the value depends on the board alone) and
asks ``exact_values.best_actions`` whether the reply kept the value. A move that lost it is one of:
- ``left a win``: a move won at once and the reply did not keep the win (``envs/tactics.one_ply``);
- ``missed a block``: the opponent threatened to win at once and the reply let it;
- ``positional``: neither, e.g. a reply that lets the opponent fork, or a second corner after a corner opening.
The most frequent positional losses are listed with their board. The first turn of each game is not in the log (the
reply starts after the prompt), so the first seat's turns start at move 3 and the second seat's at move 4. A turn
that follows a rejected reply is skipped. Needs no GPU and no model:

    python bench/learning/value_turns.py runs/x/logs/grpo-*.samples.jsonl.gz [--window 40] \\
        [--out docs/runs/X/value_turns]
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

# beside this script
from game_log_report import board_rows, report_main, shown_turns, training_games, window_start

from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.openspiel_rules import load_game
from verl_ext.envs.tactics import one_ply

CASE = "tic_tac_toe"
MARKS = ("x", "o")  # player 0, player 1 in OpenSpiel's board text
KINDS = ("left a win", "missed a block", "positional")
TOP_POSITIONAL = 3  # the positional losses listed per row
_ANSWER = re.compile(r"<answer>\s*[xo]\((\d),\s*(\d)\)\s*</answer>")


def state_of(board: list[str], to_move: int):
    """An OpenSpiel state with ``board`` (rows top first) and ``to_move`` to play, or None when no game reaches it."""
    cells = {mark: [r * 3 + c for r in range(3) for c in range(3) if board[r][c] == mark] for mark in MARKS}
    if len(cells["x"]) - len(cells["o"]) != to_move:
        return None
    state = load_game(CASE).new_initial_state()
    for i in range(len(cells["x"]) + len(cells["o"])):
        if state.is_terminal():
            return None  # a finished line before the last mark: not a position the game reaches
        state.apply_action(cells[MARKS[i % 2]][i // 2])
    return None if state.is_terminal() or state.current_player() != to_move else state


def turns_of(reply: str) -> list[tuple[list[str], int, int | None]]:
    """(board rows, seat, the cell answered or None) for each turn of the reply that shows a board and whose answer
    was not followed by a rejection."""
    turns = []
    for message, seat, answer_text in shown_turns(reply):
        board = board_rows(message, 3, 3)
        if not board:
            continue
        answer = _ANSWER.search(answer_text) if answer_text is not None else None
        cell = int(answer.group(1)) * 3 + int(answer.group(2)) if answer else None
        turns.append((board, seat, cell))
    return turns


def kind_of(state, action: int | None) -> str:
    """Why a move that lost the value lost it (``KINDS``)."""
    tactics = one_ply(CASE, state.serialize())
    if tactics is not None and tactics.win_available:
        return "left a win"
    if tactics is not None and tactics.must_block and (action is None or action in tactics.losing):
        return "missed a block"
    return "positional"


def tally(path: Path, window: int) -> dict[tuple[int, int, int], dict[str, Any]]:
    """{(window start, seat, move number): {"turns", "kept", KINDS..., "boards": Counter}} over the log's kept
    tic_tac_toe training replies."""
    table: dict[tuple[int, int, int], dict[str, Any]] = defaultdict(
        lambda: {"turns": 0, "kept": 0, **{kind: 0 for kind in KINDS}, "boards": Counter()})
    for row in training_games(path, (CASE,)):
        if row.get("case") != CASE or not row.get("reply"):
            continue
        start = window_start(row, window)
        for board, seat, action in turns_of(str(row["reply"])):
            state = state_of(board, seat)
            if state is None:
                continue
            best = best_actions(CASE, state)
            cell = table[(start, seat, state.move_number() + 1)]
            cell["turns"] += 1
            if action is not None and action in best:
                cell["kept"] += 1
                continue
            kind = kind_of(state, action)
            cell[kind] += 1
            if kind == "positional":
                move = "-" if action is None else state.action_to_string(seat, action)
                cell["boards"]["/".join(board) + f" -> {move}"] += 1
    return table


def rows_of(table: dict[tuple[int, int, int], dict[str, Any]], window: int) -> list[dict[str, Any]]:
    rows = []
    for (start, seat, move), cell in sorted(table.items()):
        rows.append({"steps": f"{start}-{start + window - 1}", "seat": seat, "move": move, "turns": cell["turns"],
                     "kept": cell["kept"], **{kind: cell[kind] for kind in KINDS},
                     "positional_boards": cell["boards"].most_common(TOP_POSITIONAL)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| steps | seat | move | turns | kept the value | " + " | ".join(f"lost: {k}" for k in KINDS)
             + f" | most frequent positional losses (board rows / move, up to {TOP_POSITIONAL}) |",
             "|---|---|---|---|---|" + "---|" * len(KINDS) + "---|"]
    for row in rows:
        share = f"{100 * row['kept'] / row['turns']:.0f} %" if row["turns"] else "-"
        boards = "; ".join(f"`{board}` ({n})" for board, n in row["positional_boards"])
        lines.append(f"| {row['steps']} | {row['seat']} | {row['move']} | {row['turns']} | {row['kept']} ({share}) | "
                     + " | ".join(str(row[k]) for k in KINDS) + f" | {boards} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, __doc__, 40, lambda log, window: rows_of(tally(log, window), window), markdown,
                       "no kept tic_tac_toe training reply")


if __name__ == "__main__":
    raise SystemExit(main())
