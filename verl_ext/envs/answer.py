"""Strict extraction of the final answer from a model response (model output is hostile input)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_CLOSE = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
# Control characters other than tab/newline/carriage return never belong in an answer.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class ParsedAnswer:
    """The answer text if the response is well formed, else ``None`` and the reason."""

    text: str | None
    reason: str = ""

    @property
    def format_ok(self) -> bool:
        return self.text is not None


def parse_answer(
    response: object,
    *,
    max_response_chars: int,
    max_answer_chars: int,
    single_line: bool,
) -> ParsedAnswer:
    """Return the content of the single ``<answer>...</answer>`` block ending the response.

    Rejected (``text=None``): non-strings, over-long responses, zero or several answer tags
    (listing many moves must not pay), text after the closing tag, an empty or over-long answer,
    control characters, or a multi-line answer where one line is expected.
    """
    if not isinstance(response, str):
        return ParsedAnswer(None, "not_text")
    if len(response) > max_response_chars:
        return ParsedAnswer(None, "response_too_long")
    opens = _OPEN.findall(response)
    closes = list(_CLOSE.finditer(response))
    if not opens or not closes:
        return ParsedAnswer(None, "no_answer_tag")
    if len(opens) > 1 or len(closes) > 1:
        return ParsedAnswer(None, "several_answer_tags")
    start = _OPEN.search(response)
    assert start is not None
    close = closes[0]
    if close.start() < start.end():
        return ParsedAnswer(None, "no_answer_tag")
    if response[close.end():].strip():
        return ParsedAnswer(None, "text_after_answer")
    content = response[start.end():close.start()].strip()
    if not content:
        return ParsedAnswer(None, "empty_answer")
    if len(content) > max_answer_chars:
        return ParsedAnswer(None, "answer_too_long")
    if _CONTROL.search(content):
        return ParsedAnswer(None, "control_characters")
    if single_line:
        if "\n" in content or "\r" in content:
            return ParsedAnswer(None, "multi_line_answer")
        content = _SPACES.sub(" ", content)
    return ParsedAnswer(content)


NO_ANSWER_ID = 0.0
MAX_NAMED_ACTION = 4096  # action_named_by scans the ids of actions below this (connect_four has 7, go 19x19 362)
_ANSWER_ID_SPAN = 2 ** 24 - 1  # ids stay exact in float32 too: reward extras may pass through either


def answer_id(text: str | None) -> float:
    """A number standing for one canonical answer, for reward extras (which must be numbers): ``NO_ANSWER_ID`` for
    a malformed reply (``None``), else 1 .. 2**24-1 from a hash of the text. Equal answers get equal ids; two
    different answers share one with probability ~6e-8."""
    if text is None:
        return NO_ANSWER_ID
    digest = hashlib.blake2b(str(text).encode("utf-8", "backslashreplace"), digest_size=8).digest()
    return float(int.from_bytes(digest, "big") % _ANSWER_ID_SPAN + 1)


def action_key(action: int) -> str:
    """The canonical answer of a legal game move: its OpenSpiel action, so that one move written two ways (``x3``
    and ``o3`` in connect_four) is one answer for the collapse metrics."""
    return f"action:{action}"


def move_answer_key(actions: Mapping[str, int], move: str) -> str:
    """What the collapse metrics count as one answer for ``move`` in a position whose legal moves map to
    ``actions``: its OpenSpiel action (``action_key``) when legal, so that connect_four's ``x3`` and ``o3``
    (column 3 whoever moves) are one favourite; other text stays itself."""
    action = actions.get(move)
    return move if action is None else action_key(action)


@lru_cache(maxsize=1)
def _action_ids() -> dict[float, int]:
    return {answer_id(action_key(action)): action for action in range(MAX_NAMED_ACTION)}


def action_named_by(answer: float) -> int | None:
    """The OpenSpiel action whose canonical answer has id ``answer``, or None (not a game move, or a larger
    action): names a logged favourite whose reply text the sample log did not keep."""
    return _action_ids().get(float(answer))
