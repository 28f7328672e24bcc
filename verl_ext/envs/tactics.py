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

from .openspiel_rules import legal_move_actions, load_game


# Positions with more legal moves are left out (None): the check plays every move and every reply (moves x replies
# clones), which must stay cheap inside the reward; tic_tac_toe has at most 9 and connect_four 7.
MAX_MOVES = 64


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

    @property
    def has_tactic(self) -> bool:
        """A win to take or a threat to block: the positions the tactics line and ``train_positions=tactical``
        are about."""
        return self.win_available or self.must_block

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
    (``has_tactics``), a position that is not a two-player decision, or one of more than ``MAX_MOVES`` moves."""
    if not has_tactics(case):
        return None
    state = load_game(case).deserialize_state(state_str)
    if state.is_terminal() or state.is_chance_node() or state.current_player() not in (0, 1):
        return None
    if len(state.legal_actions()) > MAX_MOVES:
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


@functools.lru_cache(maxsize=1 << 16)
def tactical_move_texts(case: str, state_str: str) -> tuple[str, ...]:
    """The legal moves of the serialised decision node ``state_str``, as the model writes them (``legal_move_actions``,
    in its order), that a one-ply tactician picks from (``OnePly.tactical_moves``); () where ``one_ply`` has no
    analysis (a game without tactics, a chance or terminal node, too many moves). A move text names the action it
    plays (the first of a tie), so a text is tactical when that action is."""
    tactics = one_ply(case, state_str)
    if tactics is None:
        return ()
    picks = tactics.tactical_moves()
    moves = legal_move_actions(load_game(case).deserialize_state(state_str))
    return tuple(move for move, action in moves.items() if action in picks)


TACTIC_KEYS = ("win_chance", "win_taken", "block_chance", "blocked")


def tactic_flags(tactics: OnePly | None, action: int | None) -> dict[str, float]:
    """One reply's one-ply tactics as 0/1 numbers (the reward's extras): a win on the board and whether the reply
    (its action; None when not a legal move) took it; a threat to block and whether the reply blocked it."""
    win = tactics is not None and tactics.win_available
    block = tactics is not None and tactics.must_block
    return {"win_chance": float(win), "win_taken": float(win and action in tactics.winning),
            "block_chance": float(block),
            "blocked": float(block and action is not None and action not in tactics.losing)}


def tactics_line(tables: list[tuple[OnePly, dict[int, float]]]) -> float | None:
    """The mean engine score of the one-ply tactician over positions (``(tactics, task scores)`` pairs): in each
    position the mean score of its tactical moves. None without positions."""
    if not tables:
        return None
    per_position = [sum(scores[a] for a in tactics.tactical_moves()) / len(tactics.tactical_moves())
                    for tactics, scores in tables]
    return sum(per_position) / len(per_position)
