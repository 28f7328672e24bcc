"""Settings of full-game rows (``data.env.<env>.game.*``): opponent, forfeit rules, caps, reward terms."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..seeding import weighted_draw
from .config import ConfigError
from .episode import Opponent
from .opponent_mixture import OpponentMixture, parse_opponent_list, parse_opponent_text

FOLLOWUP_PROMPTS = ("full", "compact")
# a normalised move advantage above this would drown the game's own (itself about 1 in size)
MAX_MOVE_CREDIT = 10.0


@dataclass
class GameSettings:
    """How a full game is played and scored (``data.env.openspiel.game.*``; docs/games.md explains each)."""

    opponent: str = "random"          # random | mcts:N | cfr[:N] | self, or a mixture: random:0.3,mcts:25:0.4,self:0.3
    opponents: list[Any] | None = None  # [{spec: random, weight: 0.3}, ...]; replaces `opponent` when given
    # per case, a mixture that replaces the one above for that case's games: {connect_four: "random:0.5,mcts:5:0.5"}
    # (a string as `opponent`, or a list as `opponents`); the other cases keep the one above
    opponents_by_case: dict[str, Any] | None = None
    illegal_retries: int = 1          # extra tries at a turn after an unparseable or illegal reply, then forfeit
    max_moves: int = 0                # stop the game after this many moves of all players (0: no cap)
    max_tokens_per_turn: int = 256    # generation budget of one reply
    followup_prompt: str = "full"     # full: every turn shows the single-move prompt; compact: without instructions
    truncated_reward: float = 0.0     # outcome value of a game stopped by a cap or the token budget
    format_weight: float = 0.0        # share of the reward for the rate of well-formed replies
    legal_weight: float = 0.0         # share of the reward for the rate of legal replies
    # share of the reward, in a game played to its end (no forfeit, no cap), for the one-ply tactics played right
    # (wins on the board taken, threats blocked; 1.0 without such a turn): a missed block the opponent did not punish
    # still costs, and a lost game still pays for the blocks it made
    tactics_weight: float = 0.0
    # share of the reward, in a game played to its end, for the policy's moves that kept the position's value under
    # best play (envs/exact_values.py); only in games small enough to search to the end (tic_tac_toe): in the
    # others the share goes to the outcome
    value_weight: float = 0.0
    # relative weight of each seat for the trained policy, one per player, e.g. [1, 3]: the second seat in about 3
    # games of 4 (drawn from the task's seed, so a GRPO group shares it); None: the seat alternates with the task index
    seat_weights: list[float] | None = None
    # scale of an advantage per reply added to the game's GRPO advantage, in games small enough to value exactly
    # (tic_tac_toe): whether the reply kept the position's value, normalised over its GRPO group's replies
    # (verl_ext/patches/move_credit.py); 0: off, every advantage as verl computes it
    move_credit: float = 0.0

    def validate(self, where: str) -> None:
        self.opponent_mixture_at(where)
        for case in self.opponents_by_case or {}:
            if not isinstance(case, str) or not case:
                raise ConfigError(f"{where}.opponents_by_case: keys are case names, got {case!r}")
            self.opponent_mixture_at(where, case)
        for key in ("illegal_retries", "max_moves"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{where}.{key}: must be >= 0, got {getattr(self, key)!r}")
        if self.max_tokens_per_turn <= 0:
            raise ConfigError(f"{where}.max_tokens_per_turn: must be > 0, got {self.max_tokens_per_turn!r}")
        if self.followup_prompt not in FOLLOWUP_PROMPTS:
            raise ConfigError(f"{where}.followup_prompt: unknown value {self.followup_prompt!r} "
                              f"(choose from {FOLLOWUP_PROMPTS})")
        if not 0.0 <= self.truncated_reward <= 1.0:
            raise ConfigError(f"{where}.truncated_reward: must be in [0, 1], got {self.truncated_reward!r}")
        for key in ("format_weight", "legal_weight", "tactics_weight", "value_weight"):
            if getattr(self, key) < 0.0:
                raise ConfigError(f"{where}.{key}: must be >= 0, got {getattr(self, key)!r}")
        if not (isinstance(self.move_credit, (int, float)) and math.isfinite(self.move_credit)
                and 0.0 <= self.move_credit <= MAX_MOVE_CREDIT):
            raise ConfigError(f"{where}.move_credit: a number in [0, {MAX_MOVE_CREDIT}] (0: off), got "
                              f"{self.move_credit!r}")
        if self.seat_weights is not None:
            self.seat_weights = _seat_weights(self.seat_weights, f"{where}.seat_weights")
        if self.format_weight + self.legal_weight + self.tactics_weight + self.value_weight >= 1.0:
            raise ConfigError(f"{where}.format_weight + legal_weight + tactics_weight + value_weight: must be < 1 (the "
                              f"rest rewards the outcome), got {self.format_weight} + {self.legal_weight} + "
                              f"{self.tactics_weight} + {self.value_weight}")

    def opponent_mixture_at(self, where: str, case: str | None = None) -> OpponentMixture:
        """The opponents and their weights of ``case``'s games (its ``opponents_by_case`` entry, else the shared
        mixture); errors name ``where``.opponent(s) or ``where``.opponents_by_case.<case> and the value."""
        if case is not None and self.opponents_by_case and case in self.opponents_by_case:
            value, key = self.opponents_by_case[case], f"{where}.opponents_by_case.{case}"
            if isinstance(value, str):
                return parse_opponent_text(value, key)
            if isinstance(value, list):
                return parse_opponent_list(value, key)
            raise ConfigError(f"{key}: expected an opponent string ('random:0.5,mcts:5:0.5') or a list of "
                              f"{{spec, weight}} mappings, got {value!r}")
        if self.opponents is not None:
            return parse_opponent_list(self.opponents, f"{where}.opponents")
        return parse_opponent_text(self.opponent, f"{where}.opponent")

    @property
    def opponent_mixture(self) -> OpponentMixture:
        return self.opponent_mixture_at("game")

    def opponent_for(self, seed: int, case: str | None = None) -> Opponent:
        """The opponent of ``case``'s game seeded ``seed`` (one spec: always that one)."""
        return self.opponent_mixture_at("game", case).draw(seed)

    def seat_for(self, seed: int, index: int, players: int) -> int:
        """The trained policy's seat in the game of task ``index`` seeded ``seed``: drawn from the seed by
        ``seat_weights`` (one weight per seat: ``players`` of them), else ``index % players``."""
        if self.seat_weights is None:
            return index % players
        if len(self.seat_weights) != players:
            raise ConfigError(f"game.seat_weights: one weight per seat, {players} for this game, got "
                              f"{self.seat_weights!r}")
        return weighted_draw(self.seat_weights, seed, "seat")

    @property
    def opponent_spec(self) -> Opponent:
        """The single opponent; a mixture has none (use ``opponent_for(seed)``)."""
        mixture = self.opponent_mixture
        if not mixture.is_single:
            labels = ",".join(o.label for o in mixture.opponents)
            raise ConfigError(f"game.opponent: {labels!r} is a mixture; the opponent of a game is "
                              "opponent_for(its seed)")
        return mixture.opponents[0]


def _seat_weights(value: Any, key: str) -> list[float]:
    """``value`` as finite weights >= 0 with a positive sum (numbers, or their strings from a shell variable)."""
    try:
        weights = [float(weight) for weight in value]
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: numbers, one per seat (e.g. [1, 3]), got {value!r}") from None
    if not weights or any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError(f"{key}: finite weights >= 0, one per seat, with a positive sum (e.g. [1, 3]), got {value!r}")
    return weights
