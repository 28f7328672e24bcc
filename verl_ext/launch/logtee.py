"""``tee`` that stamps the log file: the console gets the run's output unchanged, the file gets every line
prefixed with the local wall-clock time it arrived (``2026-11-23 11:29:16.123 | ``).

    CMD 2>&1 | python -u verl_ext/launch/logtee.py --started "$EPOCHREALTIME" RUN.log

verl prints its config, validation metrics and ``step:N`` lines without a time, and vLLM stamps only to the
second without a year; the stamps let ``bench/startup/startup_breakdown.py`` time every start-up milestone. The first
file line marks the train script's start (``--started``, epoch seconds), the second the start of the run's command
(the tee starts with it, after the script's checks). Output passes through in chunks as it
arrives (progress bars with ``\\r`` included); Ctrl-C is left to the run, so its last lines are still logged.
Run by path, not ``-m``, so it starts without importing verl_ext.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

LAUNCH_MARK = "[verl-ext] launch: train script started"
# The tee starts together with the run's command, i.e. when the script's checks before it are done
COMMAND_MARK = "[verl-ext] launch: command started"
SEPARATOR = " | "
_CHUNK = 65536


def stamp(epoch: float) -> bytes:
    """``YYYY-MM-DD HH:MM:SS.mmm | `` in local time (the zone Ray, verl and vLLM stamp their lines in)."""
    whole = int(epoch)
    millis = int(round((epoch - whole) * 1000))
    if millis == 1000:
        whole, millis = whole + 1, 0
    return (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(whole)) + f".{millis:03d}{SEPARATOR}").encode()


def parse_epoch(text: str) -> float:
    """Epoch seconds from ``$EPOCHREALTIME`` (whose decimal mark follows the locale) or ``date +%s``."""
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        raise ValueError(f"--started: expected epoch seconds (bash's $EPOCHREALTIME), got {text!r}") from None


class StampedTee:
    """Copies chunks to ``console`` as they are and to ``log`` with a stamp at the start of every line."""

    def __init__(self, console: BinaryIO | None, log: BinaryIO, clock: Callable[[], float] = time.time) -> None:
        self.console, self.log, self.clock = console, log, clock
        self.at_line_start = True

    def header(self, started: float) -> None:
        """The launch line at ``started`` and the command line now (the tee starts with the run's command)."""
        self.log.write(stamp(started) + LAUNCH_MARK.encode() + b"\n")
        self.log.write(stamp(self.clock()) + COMMAND_MARK.encode() + b"\n")
        self.log.flush()

    def write(self, chunk: bytes) -> None:
        if self.console is not None:
            try:
                self.console.write(chunk)
                self.console.flush()
            except OSError:  # the console went away (closed pipe): keep the run and its log going
                self.console = None
        now = stamp(self.clock())
        lines = chunk.split(b"\n")
        out = bytearray()
        for i, piece in enumerate(lines):
            last = i == len(lines) - 1
            if last and not piece:
                break  # the chunk ended with a newline: the next chunk starts a line
            if self.at_line_start:
                out += now
            out += piece
            if not last:
                out += b"\n"
            self.at_line_start = not last
        self.log.write(bytes(out))
        self.log.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="log file (appended to)")
    parser.add_argument("--started", help="when the train script started, epoch seconds (default: now)")
    args = parser.parse_args(argv)
    try:
        started = parse_epoch(args.started) if args.started else time.time()
    except ValueError as err:
        parser.error(str(err))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run handles Ctrl-C; we drain its output until EOF
    with open(args.log, "ab") as log:
        tee = StampedTee(sys.stdout.buffer, log)
        tee.header(started)
        while chunk := os.read(sys.stdin.fileno(), _CHUNK):
            tee.write(chunk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
