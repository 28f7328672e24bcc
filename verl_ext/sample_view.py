"""``verl-ext samples``: print the replies a run's sample log kept (``VERL_EXT_SAMPLE_TEXTS`` per step).

    verl-ext samples logs/<run>.samples.jsonl                 # every step's kept replies
    verl-ext samples logs/<run>.samples.jsonl --step 5        # verl's step 5
    verl-ext samples logs/<run>.samples.jsonl --last --n 3    # the last step, three replies
    verl-ext samples logs/<run>.samples.jsonl --split val     # the validation passes

Each reply is shown with its env, case, score, format and legality, and how much of it the log cut. The text is
the model's output: control and direction-override characters are shown as escapes, never sent to the terminal,
and rich markup in it is printed as text. Lines that are not JSON (a run killed mid-write) are skipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from .sample_text import as_text, cut, printable

Group = tuple[str, int]  # ("step", 5) for a training step, ("val pass", 2), ("train block", 3) without steps


def read_replies(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The log's lines that kept a reply, in file order, and how many lines were not JSON objects."""
    replies: list[dict[str, Any]] = []
    bad = 0
    for line in log_lines(path):
        if '"reply"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(entry, dict) and "reply" in entry:
            replies.append(entry)
        else:
            bad += 1
    return replies, bad


def log_lines(path: Path) -> Iterator[str]:
    """The lines of a sample log, plain or gzipped; bytes that are not UTF-8 are replaced."""
    opened = gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.suffix == ".gz" \
        else path.open(encoding="utf-8", errors="replace")
    with opened as text:
        yield from text


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def group_of(entry: dict[str, Any]) -> Group:
    """Where a kept reply belongs: its training step, else its validation pass or block."""
    split = as_text(entry.get("split"), 16)
    step, block = _int(entry.get("step")), _int(entry.get("block"))
    if split == "train" and step is not None:
        return "step", step
    return f"{split or '?'} {'pass' if split == 'val' else 'block'}", block if block is not None else 0


def select(replies: list[dict[str, Any]], split: str, step: int | None, last: bool, n: int) \
        -> list[tuple[Group, list[dict[str, Any]]]]:
    """The groups to show, in order, at most ``n`` replies each."""
    groups: dict[Group, list[dict[str, Any]]] = {}
    for entry in replies:
        entry_split = as_text(entry.get("split"), 16)
        if split != "all" and entry_split != split:
            continue
        group = group_of(entry)
        if step is not None and group != ("step", step):
            continue
        groups.setdefault(group, []).append(entry)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] != "step", item[0][0], item[0][1]))
    if last and ordered:
        ordered = ordered[-1:]
    return [(group, entries[:n]) for group, entries in ordered]


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return printable(as_text(value, 32))[:32] if value is not None else "-"
    return f"{value:g}"


def title(entry: dict[str, Any]) -> str:
    """``openspiel/tic_tac_toe  score 0.55  format 1  valid 1  reply 5,456 chars (3,456 cut)``."""
    env = printable(as_text(entry.get("env"), 64))[:64]
    case = printable(as_text(entry.get("case"), 200))[:200]
    parts = [f"{env}/{case}", f"score {_number(entry.get('score'))}", f"format {_number(entry.get('format_ok'))}",
             f"valid {_number(entry.get('valid'))}"]
    if _int(entry.get("game")) == 1:
        outcome = [key for key in ("win", "draw", "loss", "forfeit", "truncated") if _int(entry.get(key)) == 1]
        parts.append(f"game {'/'.join(outcome) or '?'}")
    if _int(entry.get("failed")) == 1:
        parts.append("FAILED")
    chars, removed = _int(entry.get("reply_chars")), _int(entry.get("reply_cut"))
    if chars is not None:
        parts.append(f"reply {chars:,} chars" + (f" ({removed:,} cut in the log)" if removed else ""))
    return "  ".join(parts)


def show(groups: list[tuple[Group, list[dict[str, Any]]]], chars: int, out: TextIO) -> None:
    """Print each group's replies with rich (plain text when ``out`` is not a terminal)."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.text import Text

    console = Console(file=out, highlight=False, emoji=False, markup=False)
    for (kind, number), entries in groups:
        console.print(Rule(Text(f"{kind} {number}: {len(entries)} repl{'y' if len(entries) == 1 else 'ies'}")))
        for entry in entries:
            text, _ = cut(as_text(entry.get("reply"), chars * 4 + 64), chars)
            console.print(Panel(Text(printable(text) or "(empty reply)"), title=Text(title(entry)),
                                title_align="left"))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``verl-ext samples``."""
    parser = argparse.ArgumentParser(prog="verl-ext samples", description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a run's <run>.samples.jsonl (or .jsonl.gz)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--step", type=int, help="verl's training step to show")
    where.add_argument("--last", action="store_true", help="only the last step (or pass) that kept replies")
    parser.add_argument("--n", type=int, default=8, help="replies per step at most (default 8)")
    parser.add_argument("--split", default="train", choices=["train", "val", "all"], help="default train")
    parser.add_argument("--chars", type=int, default=2000, help="characters of each reply to print (default 2000)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.chars < 1:
        parser.error(f"--n and --chars must be >= 1; got --n {args.n} --chars {args.chars}")
    if not args.log.is_file():
        print(f"verl-ext samples: no such file {str(args.log)!r}", file=sys.stderr)
        return 2
    try:
        replies, bad = read_replies(args.log)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        print(f"verl-ext samples: cannot read {str(args.log)!r}: {err}", file=sys.stderr)
        return 2
    groups = select(replies, args.split, args.step, args.last, args.n)
    if bad:
        print(f"verl-ext samples: skipped {bad} line(s) that are not JSON objects", file=sys.stderr)
    if not groups:
        wanted = f"step {args.step}" if args.step is not None else f"split {args.split}"
        steps = sorted({g[1] for g in (group_of(e) for e in replies) if g[0] == "step"})
        known = f"; steps with replies: {steps[0]}-{steps[-1]}" if steps else ""
        print(f"verl-ext samples: no kept replies for {wanted} in {args.log} ({len(replies)} replies in all{known}; "
              f"the log keeps VERL_EXT_SAMPLE_TEXTS per step, default 8)", file=sys.stderr)
        return 1
    show(groups, args.chars, sys.stdout)
    return 0
