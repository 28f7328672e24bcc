"""OpenSpiel helpers shared by the adapter (``openspiel_env.py``) and its whole-game episodes
(``openspiel_episode.py``), so that neither imports the other at run time."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import pyspiel


@lru_cache(maxsize=256)
def load_game(case: str) -> pyspiel.Game:
    """Load (once per process) the game behind a case string."""
    return pyspiel.load_game(case)


def legal_move_actions(state: pyspiel.State) -> dict[str, int]:
    """Legal moves of the player to move, by the move string a model writes (first action wins on a tie)."""
    player = state.current_player()
    moves: dict[str, int] = {}
    for action in state.legal_actions(player):
        moves.setdefault(state.action_to_string(player, action), action)
    return moves


def match_move(moves: Mapping[str, int], answer: str) -> str | None:
    """The legal move (a key of ``moves``) that ``answer`` names, or None.

    An exact match first. Moves that OpenSpiel writes in parentheses (Hanabi's ``(Play 0)``, ``(Reveal player +1
    color R)``) also match an answer that drops a parenthesis, changes the letter case or the spacing, or ends in a
    punctuation (``Play 0``, ``(play 0)``, ``(Play 0):``), when exactly one legal move matches that way: in
    the H200 run of 2026-11-27 these were a third of the rejected Hanabi replies (formatting, not a misread
    position). Other moves stay exact: case tells chess's ``Bxc3`` from ``bxc3``."""
    if answer in moves:
        return answer
    key = _loose_key(answer)
    found = [move for move in moves if move.startswith("(") and move.endswith(")") and _loose_key(move) == key]
    return found[0] if len(found) == 1 else None


def _loose_key(text: str) -> str:
    """``text`` without surrounding whitespace, trailing punctuation, an opening and a closing parenthesis, case and
    repeated spaces."""
    text = text.strip().rstrip(".,:;!").strip().removeprefix("(").removesuffix(")")
    return " ".join(text.split()).casefold()


def normalised_return(game: pyspiel.Game, value: float) -> float:
    """A return mapped to [0, 1] by the game's utility range (0.5 when the range is empty)."""
    lo, hi = game.min_utility(), game.max_utility()
    return min(1.0, max(0.0, (value - lo) / (hi - lo))) if hi > lo else 0.5
