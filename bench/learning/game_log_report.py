"""What the whole-game reports of a sample log share (ending_pay.py, tactic_pay.py, block_lines.py, value_turns.py):
reading its training game rows, the turns a kept game text shows, the board a turn's prompt shows, the step window a
row falls in, and the command line that prints a table per window and writes it as OUT.json and OUT.md."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from verl_ext.sample_view import log_lines

_SEAT = re.compile(r"as player (\d) of 2")


def training_games(path: Path, needles: tuple[str, ...] = ('"train"',)) -> Iterator[dict[str, Any]]:
    """The training rows of whole games in a sample log (plain or gzipped). A line without every one of
    ``needles`` is skipped before it is parsed; a line that does not parse is skipped."""
    for line in log_lines(path):
        if not all(needle in line for needle in needles):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("split") == "train" and row.get("game"):
            yield row


def shown_turns(reply: str) -> Iterator[tuple[str, int, str | None]]:
    """(the prompt message, the policy's seat, its reply's text or None) for each turn of a two-player game's kept
    text after the first (whose prompt precedes the reply), skipping a turn whose reply was rejected."""
    seat_match = _SEAT.search(reply)
    if not seat_match:
        return
    seat = int(seat_match.group(1))
    messages = reply.split("\nuser\n")
    for message, following in zip(messages[1:], messages[2:] + [""]):
        if "That reply was rejected" in following:
            continue
        answer_part = message.split("\nassistant\n", 1)
        yield message, seat, answer_part[1] if len(answer_part) == 2 else None


def board_rows(message: str, rows: int, columns: int) -> list[str] | None:
    """The ``rows`` x ``columns`` board a prompt shows after "Current state:" (rows top first, OpenSpiel's unspaced
    cells of x, o and .), whether drawn raw or, with ``openspiel.board_text`` grid / columns / lines
    (verl_ext/envs/board_text.py), as a numbered grid of spaced cells (the column and diagonal lines below the grid
    repeat its cells); None when the prompt shows no such board."""
    raw = re.search(rf"Current state:\n((?:[.xo]{{{columns}}}\n){{{rows}}})", message)
    if raw:
        return raw.group(1).splitlines()
    header = " ".join(str(column) for column in range(columns))
    grid = re.search(rf"Current state:\n +{header}\n((?:\d(?: [.xo]){{{columns}}}\n){{{rows}}})", message)
    if grid:
        return [line[1:].replace(" ", "") for line in grid.group(1).splitlines()]
    return None


def window_start(row: dict[str, Any], window: int) -> int:
    """The first step of the ``window``-step window that the row's ``step`` (1 when missing) falls in."""
    return (max(int(row.get("step") or 0), 1) - 1) // window * window + 1


def report_main(argv: list[str] | None, doc: str, default_window: int,
                rows_for: Callable[[Path, int], list[dict[str, Any]]],
                markdown: Callable[[list[dict[str, Any]]], str], nothing_found: str) -> int:
    """The reports' command line: LOG, --window (steps per row), --out (also OUT.json and OUT.md). Prints the
    table, or ``LOG: nothing_found`` and returns 1 when there are no rows."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the run's <run>.samples.jsonl (or .jsonl.gz)")
    parser.add_argument("--window", type=int, default=default_window,
                        help=f"steps per row (default {default_window})")
    parser.add_argument("--out", type=Path, help="also write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.window <= 0:
        parser.error(f"--window: must be > 0, got {args.window}")
    rows = rows_for(args.log, args.window)
    if not rows:
        print(f"{args.log}: {nothing_found}")
        return 1
    text = markdown(rows)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
        args.out.with_suffix(".md").write_text(text + "\n")
    return 0
