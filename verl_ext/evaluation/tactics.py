"""One-ply tactics of a position: the moves that win at once and the moves that let the opponent win at once.

A model that reads the board takes an immediate win and blocks an immediate threat; one that has learnt a
favourite move does neither more often than chance. The single-move suite reports, per case, how often a model
took the win where one was on the board and avoided the losing moves where a threat had to be blocked, and the
**tactics line**: what a player that knows only these one-ply tactics scores (a random winning move where there is
one, else a random move that does not lose at once, else a random move). Between the fixed-move line and the
tactics line lies "reads the board a little"; above the tactics line, planning beyond one move (docs/eval.md).

Only two-player games of perfect information have these tactics here; OpenSpiel plays every move (no rules of
our own), and a move followed by a chance node is never counted as losing (the opponent's reply is not known).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyspiel

from ..envs.openspiel_env import load_game


@dataclass(frozen=True)
class OnePly:
    """The legal actions of a position split by their one-ply outcome for the player to move."""

    legal: frozenset[int]
    winning: frozenset[int]  # the game ends at once with the mover ahead
    losing: frozenset[int]  # the opponent can then end the game at once ahead of the mover

    @property
    def win_available(self) -> bool:
        return bool(self.winning)

    @property
    def must_block(self) -> bool:
        """No win on the board, some moves lose at once and some do not: the position asks for a block."""
        return not self.winning and bool(self.losing) and self.losing != self.legal

    def tactical_moves(self) -> frozenset[int]:
        """The moves a one-ply tactician picks from: the winning ones, else the safe ones, else all."""
        if self.winning:
            return self.winning
        return (self.legal - self.losing) or self.legal


@functools.cache
def has_tactics(case: str) -> bool:
    """Whether ``case`` is a two-player game of perfect information (where one-ply tactics are defined)."""
    game = load_game(case)
    kind = game.get_type()
    return game.num_players() == 2 and kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION


def _ends_ahead(state: pyspiel.State, player: int) -> bool:
    if not state.is_terminal():
        return False
    returns = state.returns()
    return returns[player] > returns[1 - player]


@functools.lru_cache(maxsize=1 << 16)  # every model of an eval asks about the same positions
def one_ply(case: str, state_str: str) -> OnePly | None:
    """The one-ply tactics of the serialised decision node ``state_str`` of ``case``; None for a game without them
    (``has_tactics``) or a position that is not a two-player decision."""
    if not has_tactics(case):
        return None
    state = load_game(case).deserialize_state(state_str)
    if state.is_terminal() or state.is_chance_node() or state.current_player() not in (0, 1):
        return None
    mover = state.current_player()
    legal, winning, losing = [], [], []
    for action in state.legal_actions():
        legal.append(action)
        after = state.clone()
        after.apply_action(action)
        if _ends_ahead(after, mover):
            winning.append(action)
        elif not after.is_terminal() and not after.is_chance_node() and after.current_player() == 1 - mover:
            for reply in after.legal_actions():
                answered = after.clone()
                answered.apply_action(reply)
                if _ends_ahead(answered, 1 - mover):
                    losing.append(action)
                    break
    return OnePly(frozenset(legal), frozenset(winning), frozenset(losing))


def tactics_line(tables: list[tuple[OnePly, dict[int, float]]]) -> float | None:
    """The mean engine score of the one-ply tactician over positions (``(tactics, task scores)`` pairs): in each
    position the mean score of its tactical moves. None without positions."""
    if not tables:
        return None
    per_position = [sum(scores[a] for a in tactics.tactical_moves()) / len(tactics.tactical_moves())
                    for tactics, scores in tables]
    return sum(per_position) / len(per_position)
