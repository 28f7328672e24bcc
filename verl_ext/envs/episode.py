"""The episode protocol: a whole game played turn by turn, beside the single-move task protocol (``base.py``).

An adapter that offers episodes implements ``start_episode(case, seed, seat)``. The episode resolves chance
nodes itself (from a RNG seeded by ``seed``), shows the player to move its own view of the game, checks a
reply with the same strict parser as single-move tasks, plays moves, and reports the returns at the end.
Who controls which seat (the model being trained, a bot, the same model again) is the match's business
(``verl_ext/games/match.py``), not the episode's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .config import ConfigError

OPPONENT_KINDS = ("random", "mcts", "cfr", "self")
DEFAULT_MCTS_SIMULATIONS = 200
DEFAULT_CFR_ITERATIONS = 1000  # = cfr_policy.DEFAULT_ITERATIONS (that module imports OpenSpiel; this one does not)
MAX_CFR_ITERATIONS = 1_000_000  # = cfr_policy.MAX_ITERATIONS
_OPPONENT = re.compile(r"^(random|self|(mcts|cfr)(?::(\d+))?)$")
# Kinds written ``kind:N`` (N simulations or iterations), so that ``kind:N:weight`` is a mixture entry.
COUNTED_KINDS = ("mcts", "cfr")


@dataclass(frozen=True)
class MoveCheck:
    """A reply checked against the current position.

    ``move`` is the parsed answer when the reply is well formed (else None, with the parser's ``reason``);
    ``legal`` says whether it names a legal move of the player to move (``reason`` is then ``ok``).
    """

    move: str | None
    legal: bool
    reason: str

    @property
    def format_ok(self) -> bool:
        return self.move is not None


@dataclass(frozen=True)
class Opponent:
    """Who plays the other seats: ``random`` (uniform random bot), ``mcts`` (OpenSpiel MCTS with ``simulations``
    per move), ``cfr`` (a bot sampling from OpenSpiel's CFR+ average policy after ``iterations``; small poker
    games only) or ``self`` (the policy being trained, in its own context, its tokens never trained on)."""

    kind: str
    simulations: int = 0
    iterations: int = 0

    @property
    def label(self) -> str:
        if self.kind == "mcts":
            return f"mcts:{self.simulations}"
        if self.kind == "cfr":
            return f"cfr:{self.iterations}"
        return self.kind

    @property
    def is_bot(self) -> bool:
        return self.kind != "self"


def parse_opponent(text: object, where: str, allowed: tuple[str, ...] = OPPONENT_KINDS) -> Opponent:
    """``"random"``, ``"mcts:200"`` (``"mcts"`` = 200 simulations), ``"cfr:1000"`` (``"cfr"`` = 1000 CFR+
    iterations) or ``"self"``; the error names ``where``."""
    value = str(text).strip() if text is not None else ""
    match = _OPPONENT.match(value)
    choices = ", ".join(f"{kind}:N" if kind in COUNTED_KINDS else kind for kind in allowed)
    if not match or value.split(":")[0] not in allowed:
        raise ConfigError(f"{where}: unknown opponent {text!r} (use {choices}, e.g. mcts:200)")
    if match.group(2) == "mcts":
        simulations = int(match.group(3) or DEFAULT_MCTS_SIMULATIONS)
        if simulations <= 0:
            raise ConfigError(f"{where}: {text!r} needs a positive number of simulations")
        return Opponent("mcts", simulations)
    if match.group(2) == "cfr":
        iterations = int(match.group(3) or DEFAULT_CFR_ITERATIONS)
        if not 0 < iterations <= MAX_CFR_ITERATIONS:
            raise ConfigError(f"{where}: {text!r} needs a number of CFR iterations in 1..{MAX_CFR_ITERATIONS}")
        return Opponent("cfr", iterations=iterations)
    return Opponent(value)


@dataclass(frozen=True)
class UtilityRange:
    """What the end of a game can pay: one return per player, each in [``low``, ``high``] (OpenSpiel's
    ``game.min_utility()`` / ``max_utility()``), summing to 0 in a ``zero_sum`` game."""

    num_players: int
    low: float
    high: float
    zero_sum: bool = False

    def normalise(self, value: float) -> float:
        """``value`` mapped to [0, 1] by the range (win 1, draw 0.5, loss 0 in two-player zero-sum games)."""
        lo, hi = self.low, self.high
        return min(1.0, max(0.0, (value - lo) / (hi - lo))) if hi > lo else 0.5


@runtime_checkable
class Episode(Protocol):
    """One game in progress. ``seat`` is the trained policy's seat; chance nodes never show."""

    case: str
    seed: int
    seat: int
    num_players: int

    def is_over(self) -> bool:
        """True once the game has ended by its own rules."""
        ...

    def current_player(self) -> int:
        """The player to move (only while the game is not over)."""
        ...

    def moves_played(self) -> int:
        """Moves made by all players so far (chance outcomes not counted)."""
        ...

    def prompt(self, compact: bool = False) -> str:
        """The prompt for the player to move: its own view and its legal moves (``compact``: no instructions)."""
        ...

    def legal_moves(self) -> tuple[str, ...]:
        """The legal moves of the player to move, as the model must write them."""
        ...

    def check(self, reply: object) -> MoveCheck:
        """Parse ``reply`` (any object, any size) for the player to move; never raises, changes nothing."""
        ...

    def play(self, move: str) -> None:
        """Play a legal ``move`` (as returned by ``check``) for the player to move, then resolve chance."""
        ...

    def answer_key(self, move: str) -> str:
        """What the collapse metrics count as one answer for a legal ``move`` of the player to move: the same
        canonical answer as the env adapter's ``answer_key`` gives the single move (OpenSpiel: its action)."""
        ...

    def move_tactics(self, move: str | None) -> dict[str, float] | None:
        """The one-ply tactics of playing ``move`` (a legal move as ``check`` returns it; None: the turn ended
        without a move, a forfeit) for the player to move: ``envs/tactics.py``'s flags (a win on the board /
        taken, a threat to block / blocked, as 0/1); None where the game or position has none. Never raises."""
        ...

    def move_keeps_value(self, move: str | None) -> bool | None:
        """Whether playing ``move`` (a legal move as ``check`` returns it; None: a turn that ended without one) keeps
        the position's game-theoretic value for the player to move (``envs/exact_values.py``; a turn without a
        move does not); None where the game cannot be searched to its end or is over. Never raises."""
        ...

    def tactical_moves(self) -> tuple[str, ...]:
        """The legal moves of the player to move (as ``legal_moves`` writes them) that a one-ply tactician picks
        from (``envs/tactics.py``: the winning moves, else those that do not let the opponent win at once, else
        all); () where the game or position has no one-ply analysis. The arena hands them to ``scripted:tactician``.
        Never raises."""
        ...

    def play_bot(self, opponent: Opponent) -> str:
        """Let the bot ``opponent`` move for the player to move; returns the move played."""
        ...

    def play_random(self) -> str:
        """Play a uniformly random legal move (seeded) for the player to move; returns it."""
        ...

    def reference_move(self) -> str | None:
        """The move the env teaches for the player to move (for SFT demonstrations of whole games: an engine's
        move, or a policy's that sees only the player's view), or None where the env has none for this game."""
        ...

    def returns(self) -> list[float]:
        """Every player's return (meaningful once the game is over)."""
        ...

    def normalised_return(self, player: int) -> float:
        """``player``'s return mapped to [0, 1] by the game's utility range (win 1, draw 0.5, loss 0)."""
        ...


@runtime_checkable
class EpisodeEnv(Protocol):
    """An adapter that can also play whole games."""

    def start_episode(self, case: str, seed: int, seat: int) -> Episode:
        """A new game of ``case``, deterministic in ``seed``, with the trained policy in ``seat``."""
        ...

    def opponent_problem(self, case: str, opponent: Opponent) -> str | None:
        """Why ``opponent`` cannot play ``case`` (e.g. MCTS needs terminal rewards), else None."""
        ...

    def utility_range(self, case: str) -> UtilityRange:
        """The players and the range of returns of ``case`` (the reward checks game records against it)."""
        ...

    def values_exactly(self, case: str) -> bool:
        """Whether ``case``'s games can be searched to the end, so the reward's ``game.value_weight`` applies."""
        ...
