"""Game-theoretic move values for games small enough to search to the end (``engine_solver: exact``).

The engine reward's default values come from OpenSpiel MCTS with random rollouts: how a move fares when play goes
on at random. In tic_tac_toe that ranks some losing opening replies first (after ``x(0,2)`` it plays ``o(0,0)``,
where only the centre draws): 391 of 5,000 SFT rows taught such a move and GRPO was paid full marks for it
(docs/runs/2026-11-27-h100-smollm2-sft-sweep/, checked with ``bench/learning/engine_fidelity.py --exact``).
``exact`` values every move by OpenSpiel's alpha-beta search instead (``open_spiel.python.algorithms.minimax``):
win, draw or loss under best play. Only for two-player zero-sum deterministic games of perfect information with
terminal rewards and at most ``MAX_GAME_LENGTH`` moves, since it searches the whole tree from each position.
"""

from __future__ import annotations

import functools

import pyspiel
from open_spiel.python.algorithms import minimax

from .openspiel_rules import load_game

# tic_tac_toe: 9. A longer game (connect_four: 42) would make one position's search run for hours.
MAX_GAME_LENGTH = 12


def exact_problem(game: pyspiel.Game) -> str | None:
    """Why ``game`` cannot be valued exactly here, or None when it can."""
    kind = game.get_type()
    if game.num_players() != 2 or kind.utility != pyspiel.GameType.Utility.ZERO_SUM:
        return "it is not a two-player zero-sum game"
    if kind.information != pyspiel.GameType.Information.PERFECT_INFORMATION:
        return "it is not a game of perfect information"
    if kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC:
        return "it has chance moves"
    if kind.reward_model != pyspiel.GameType.RewardModel.TERMINAL:
        return "it has per-step rewards"
    if game.max_game_length() > MAX_GAME_LENGTH:
        return (f"its games last up to {game.max_game_length()} moves (exact search is for games of at most "
                f"{MAX_GAME_LENGTH}; use the default engine_solver=mcts)")
    return None


def exact_move_values(game: pyspiel.Game, state: pyspiel.State) -> dict[int, float]:
    """Every legal move's value for the player to move at ``state``, in the game's return units, under best play."""
    mover = state.current_player()
    values = {}
    for action in state.legal_actions():
        after = state.clone()
        after.apply_action(action)
        if after.is_terminal():
            values[action] = float(after.returns()[mover])
        else:
            value, _ = minimax.alpha_beta_search(game, state=after, maximizing_player_id=mover)
            values[action] = float(value)
    return values


# tic_tac_toe has 4,520 non-terminal positions: a worker keeps every one it meets
_VALUED_POSITIONS = 8192


@functools.lru_cache(maxsize=64)
def exact_problem_of(case: str) -> str | None:
    """``exact_problem`` of the game ``case`` loads (cached: the reward asks once per game)."""
    return exact_problem(load_game(case))


@functools.lru_cache(maxsize=_VALUED_POSITIONS)
def _best_actions_at(case: str, serialized: str) -> frozenset[int]:
    game = load_game(case)
    values = exact_move_values(game, game.deserialize_state(serialized))
    best = max(values.values())
    return frozenset(action for action, value in values.items() if value == best)


def best_actions(case: str, state: pyspiel.State) -> frozenset[int] | None:
    """The legal actions at ``state`` that keep the position's value under best play (those of the best exact
    value for the player to move); None where ``case`` cannot be searched to the end or ``state`` is over. Cached
    per position."""
    if exact_problem_of(case) is not None or state.is_terminal():
        return None
    return _best_actions_at(case, state.serialize())
