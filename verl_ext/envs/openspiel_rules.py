"""OpenSpiel helpers shared by the adapter (``openspiel_env.py``) and its whole-game episodes
(``openspiel_episode.py``), so that neither imports the other at run time."""

from __future__ import annotations

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


def normalised_return(game: pyspiel.Game, value: float) -> float:
    """A return mapped to [0, 1] by the game's utility range (0.5 when the range is empty)."""
    lo, hi = game.min_utility(), game.max_utility()
    return min(1.0, max(0.0, (value - lo) / (hi - lo))) if hi > lo else 0.5
