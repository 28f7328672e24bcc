"""Seeds derived from named parts, identical in every process (unlike Python's salted ``hash``)."""

from __future__ import annotations

import zlib


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from its parts, the same in every process (unlike ``hash``)."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF
