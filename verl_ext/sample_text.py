"""Model replies as bounded, printable text for the sample log and its viewer. Model output is hostile input:
anything (str, bytes, None, a list), any size, any characters."""

from __future__ import annotations

import unicodedata
from typing import Any

DEFAULT_CHARS = 2000
_CUT_MARKER = "\n[... {cut} chars cut ...]\n"


def as_text(value: Any, limit: int = 1 << 20) -> str:
    """A reply as ``str``: bytes decoded as UTF-8 (bad bytes replaced), None as "", other objects by ``str``
    (cut to ``limit`` characters first where that is cheap)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value[: limit * 4]).decode("utf-8", errors="replace")
    try:
        return str(value)[:limit]
    except Exception as err:  # an object whose __str__ fails
        return f"<unprintable {type(value).__name__}: {type(err).__name__}>"


def _clean(text: str) -> str:
    """Lone surrogates (which cannot be written as UTF-8) replaced by '?'."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def cut(text: str, limit: int = DEFAULT_CHARS, tail_share: float = 0.5) -> tuple[str, int]:
    """``text`` kept to about ``limit`` characters: its head and tail around a marker that says how many
    characters were cut (``tail_share`` of the budget goes to the tail; full games keep mostly the tail).
    Returns (kept text, characters cut)."""
    limit = max(0, int(limit))
    if len(text) <= limit:
        return _clean(text), 0
    tail = int(limit * min(1.0, max(0.0, tail_share)))
    head = limit - tail
    removed = len(text) - head - tail
    kept = text[:head] + _CUT_MARKER.format(cut=removed) + (text[len(text) - tail:] if tail else "")
    return _clean(kept), removed


def printable(text: str, limit: int | None = None) -> str:
    """``text`` safe to print to a terminal: every Unicode "other" character (controls, DEL, C1, format characters
    such as the bidirectional overrides, which can hide or reorder what a terminal shows; private use, unassigned)
    shown as a ``\\xNN`` / ``\\uNNNN`` escape, tab and newline kept; at most ``limit`` characters, then "…"."""
    shown = text if limit is None else text[:limit]
    escaped = "".join(ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else _escape(ch)
                      for ch in _clean(shown))
    return escaped + ("…" if len(shown) < len(text) else "")


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
