"""Seeds derived from named parts, identical in every process (unlike Python's salted ``hash``)."""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from its parts, the same in every process (unlike ``hash``)."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


def weighted_draw(weights: Sequence[float], *parts: object) -> int:
    """The index drawn with probability proportional to ``weights`` (>= 0, some > 0), seeded by ``parts``: the same
    draw on every machine; never an index of weight 0."""
    point = random.Random(stable_seed(*parts)).random() * sum(weights)
    for index, weight in enumerate(weights):
        point -= weight
        if point < 0 and weight > 0:
            return index
    return max(index for index, weight in enumerate(weights) if weight > 0)
