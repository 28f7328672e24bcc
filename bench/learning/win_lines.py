"""Which wins a model takes on held-out positions, by the line the winning move completes (no GPU, no model).

``val_passes.py`` counts the held-out positions with a win on the board and how often a pass took one. This splits
that count by the line the win completes: vertical (a column), horizontal (a row) or diagonal. OpenSpiel prints a
board row by row, so a horizontal line is a run of characters on one line of the prompt while a vertical one is the
same character at the same offset on consecutive lines; a small model may read one and not the other.

The sample log keeps each held-out row's task seed, not its position: the positions are rebuilt from the run's
env settings (the recipe's defaults below; pass the run's own when they differ), and every rebuilt position must
agree with the log about whether a win was on the board, else the settings are not the run's and the script
stops. Where several winning moves complete different lines, the position counts as "several".

    python bench/learning/win_lines.py runs/x/logs/grpo-*.samples.jsonl --test-freq 20
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_ext.envs.board_text import LINE_LENGTHS
from verl_ext.envs.openspiel_rules import load_game
from verl_ext.envs.tactics import one_ply
from verl_ext.mixture import EnvMixture
from verl_ext.sample_view import log_lines

DIRECTIONS = {"vertical": (1, 0), "horizontal": (0, 1), "diagonal": (1, 1), "anti-diagonal": (1, -1)}


def winning_line(case: str, state_str: str, action: int) -> str:
    """The line (a key of ``DIRECTIONS``, diagonals as "diagonal") that ``action`` completes for the player to move,
    read off OpenSpiel's printed board; "?" when no line of the game's length runs through the move."""
    state = load_game(case).deserialize_state(state_str)
    board = [list(line) for line in str(state).strip().splitlines()]
    mark = "x" if state.current_player() == 0 else "o"
    if case == "connect_four":  # a drop in column `action` lands on the lowest empty row
        col = action
        row = max(r for r in range(len(board)) if board[r][col] == ".")
    else:
        row, col = divmod(action, len(board[0]))
    board[row][col] = mark
    lines = lines_through(board, row, col, mark, LINE_LENGTHS[case])
    return lines[0] if lines else "?"


def lines_through(board: Sequence[Sequence[str]], row: int, col: int, mark: str, length: int) -> list[str]:
    """The lines of at least ``length`` ``mark``s through cell (row, col) of a printed board, in ``DIRECTIONS``
    order (both diagonals as "diagonal")."""
    found = []
    for name, (dr, dc) in DIRECTIONS.items():
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < len(board) and 0 <= c < len(board[0]) and board[r][c] == mark:
                run, r, c = run + 1, r + sign * dr, c + sign * dc
        if run >= length:
            found.append("diagonal" if "diagonal" in name else name)
    return found


def win_lines(rows: list[dict[str, Any]], mixture: EnvMixture, test_freq: int) -> list[dict[str, Any]]:
    """Per (pass, case): for each kind of winning line, the positions with such a win and how many replies took a
    win. Raises ValueError when a rebuilt position disagrees with the log (the settings are not the run's)."""
    refs = {(ref.case, ref.seed): ref for ref in mixture.plan("val")}
    kinds: dict[tuple[str, int], str] = {}
    counts: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in rows:
        case, seed = str(row.get("case")), row.get("seed")
        if case not in LINE_LENGTHS or not isinstance(seed, int) or not row.get("win_chance"):
            continue
        if (case, seed) not in kinds:
            ref = refs.get((case, seed))
            state = mixture.build(ref).state if ref is not None else None
            tactic = one_ply(case, state) if state is not None else None
            if tactic is None or not tactic.win_available:
                raise ValueError(f"held-out {case} seed {seed}: the log has a win on the board, the rebuilt position "
                                 "does not: pass the run's env settings (--held-out-share, --val-tasks-per-case, "
                                 "--num-tasks-per-case, --seed)")
            lines = {winning_line(case, state, action) for action in tactic.winning}
            kinds[(case, seed)] = lines.pop() if len(lines) == 1 else "several"
        tally = counts[(int(row.get("block") or 0), case)][kinds[(case, seed)]]
        tally[0] += 1
        tally[1] += int(bool(row.get("win_taken")))
    return [{"pass": block, "step": (block - 1) * test_freq, "case": case,
             "lines": {kind: {"chances": n, "taken": k} for kind, (n, k) in sorted(by_kind.items())}}
            for (block, case), by_kind in sorted(counts.items())]


def to_markdown(records: list[dict[str, Any]]) -> str:
    """One row per (pass, case): wins taken of wins on the board, per kind of line."""
    kinds = sorted({kind for r in records for kind in r["lines"]})
    lines = ["| step | case | " + " | ".join(f"{kind}: taken / chances" for kind in kinds) + " |",
             "|---|---|" + "---|" * len(kinds)]
    for r in records:
        cells = [f"{r['lines'][k]['taken']} / {r['lines'][k]['chances']}" if k in r["lines"] else "-" for k in kinds]
        lines.append(f"| {r['step']} | {r['case']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the run's <run>.samples.jsonl (or .jsonl.gz)")
    parser.add_argument("--test-freq", type=int, required=True, help="the run's trainer.test_freq")
    parser.add_argument("--held-out-share", type=float, default=0.2)
    parser.add_argument("--val-tasks-per-case", type=int, default=500)
    parser.add_argument("--num-tasks-per-case", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0, help="data.env.openspiel.seed")
    parser.add_argument("--out", type=Path, help="also write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    rows = []
    for line in log_lines(args.log):
        if '"val"' in line:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("split") == "val":
                rows.append(row)
    cases = sorted({str(r.get("case")) for r in rows} & set(LINE_LENGTHS))
    if not cases:
        parser.error(f"{args.log}: no held-out tic_tac_toe or connect_four rows")
    mixture = EnvMixture({"openspiel": {"game_types": cases, "num_tasks_per_case": args.num_tasks_per_case,
                                        "seed": args.seed},
                          "held_out_share": args.held_out_share, "val_tasks_per_case": args.val_tasks_per_case})
    try:
        records = win_lines(rows, mixture, args.test_freq)
    except ValueError as err:
        print(f"win_lines.py: {err}", file=sys.stderr)
        return 2
    table = to_markdown(records)
    print(table, end="")
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(records, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
