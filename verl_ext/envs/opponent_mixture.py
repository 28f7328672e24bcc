"""A mixture of opponents for full-game rows: each game draws its opponent from its own seed.

Two ways to write it (docs/games.md, "Opponents"):

- ``game.opponent``: one spec (``random``, ``mcts:50``, ``cfr:1000``, ``self``) or a comma list of ``spec[:weight]``
  entries, ``random:0.3,mcts:25:0.4,self:0.3`` (an entry without a weight weighs 1; ``mcts:N`` keeps N simulations,
  ``cfr:N`` N CFR+ iterations);
- ``game.opponents``: a list of mappings ``{spec: "mcts:25", weight: 0.4}`` (weight default 1), which replaces
  ``game.opponent`` when given.

The draw is a function of the row's seed alone, so a row meets the same opponent on every machine and in every
sample of its group, and the weights are the opponents' shares over many rows. One opponent never touches the
seed: single-spec games are the same as before mixtures existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..seeding import weighted_draw
from .config import ConfigError
from .episode import COUNTED_KINDS, Opponent, parse_opponent

ENTRY_KEYS = ("spec", "weight")


@dataclass(frozen=True)
class MixtureEntry:
    """One opponent of a mixture, its weight, and the config key that named it (for errors)."""

    opponent: Opponent
    weight: float
    where: str


@dataclass(frozen=True)
class OpponentMixture:
    """Opponents with weights; ``draw(seed)`` picks one for the game of that seed."""

    entries: tuple[MixtureEntry, ...]

    @property
    def opponents(self) -> tuple[Opponent, ...]:
        return tuple(entry.opponent for entry in self.entries)

    @property
    def is_single(self) -> bool:
        return len(self.entries) == 1

    def shares(self) -> dict[str, float]:
        """Each opponent's label and its expected share of games."""
        total = sum(entry.weight for entry in self.entries)
        return {entry.opponent.label: entry.weight / total for entry in self.entries}

    def draw(self, seed: int) -> Opponent:
        """The opponent of the game seeded ``seed`` (the same on every machine)."""
        if self.is_single:
            return self.entries[0].opponent
        return self.entries[weighted_draw([entry.weight for entry in self.entries], seed, "opponent")].opponent


def _weight(value: object, where: str, entry: object) -> float:
    """A finite weight >= 0; the error names ``where`` and the entry."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: weight {value!r} of {entry!r} must be a number >= 0")
    try:
        weight = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: weight {value!r} of {entry!r} must be a number >= 0") from None
    if not math.isfinite(weight) or weight < 0:
        raise ConfigError(f"{where}: weight {value!r} of {entry!r} must be a finite number >= 0")
    return weight


def _entry_from_text(text: str, where: str) -> MixtureEntry:
    """``random``, ``random:0.3``, ``mcts:25``, ``mcts:25:0.4``, ``cfr:1000:0.5``, ``self:0.3``."""
    parts = text.split(":")
    head = 2 if parts[0] in COUNTED_KINDS else 1
    spec, rest = ":".join(parts[:head]), parts[head:]
    if len(rest) > 1:
        raise ConfigError(f"{where}: cannot read opponent entry {text!r} (use spec[:weight], e.g. mcts:25:0.4)")
    opponent = parse_opponent(spec, where)
    return MixtureEntry(opponent, _weight(rest[0], where, text) if rest else 1.0, where)


def _checked(entries: list[MixtureEntry], where: str, value: object) -> OpponentMixture:
    labels = [entry.opponent.label for entry in entries]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError(f"{where}: opponent {label!r} is listed twice in {value!r}")
    if sum(entry.weight for entry in entries) <= 0:
        raise ConfigError(f"{where}: the weights of {value!r} are all zero; give one opponent a weight > 0")
    return OpponentMixture(tuple(entries))


def parse_opponent_text(text: object, where: str) -> OpponentMixture:
    """``game.opponent``: one spec (exactly as ``parse_opponent``) or ``spec[:weight]`` entries joined by commas."""
    value = str(text).strip() if text is not None else ""
    if "," not in value and value.count(":") <= (1 if value.split(":")[0] in COUNTED_KINDS else 0):
        return OpponentMixture((MixtureEntry(parse_opponent(text, where), 1.0, where),))
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ConfigError(f"{where}: empty opponent entry in {text!r} (use e.g. random:0.3,mcts:25:0.4,self:0.3)")
    return _checked([_entry_from_text(part, where) for part in parts], where, text)


def parse_opponent_list(items: object, where: str) -> OpponentMixture:
    """``game.opponents``: ``[{spec: random, weight: 0.3}, {spec: "mcts:25", weight: 0.4}, ...]``."""
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected a non-empty list of {{spec, weight}} mappings, got {items!r}")
    entries = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: expected a mapping {{spec: ..., weight: ...}}, got {item!r}")
        unknown = sorted(set(item) - set(ENTRY_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown key {unknown[0]!r} (known keys: {', '.join(ENTRY_KEYS)})")
        if "spec" not in item:
            raise ConfigError(f"{at}: missing key 'spec' (random, mcts:N, cfr:N or self)")
        opponent = parse_opponent(item["spec"], f"{at}.spec")
        entries.append(MixtureEntry(opponent, _weight(item.get("weight", 1.0), f"{at}.weight", item), at))
    return _checked(entries, where, items)
