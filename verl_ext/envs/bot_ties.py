"""OpenSpiel's MCTS bot with its final choice drawn at random among the moves its search rates equally.

``MCTSBot.step`` plays ``root.best_child()``: the maximum of (proven outcome, visit count, total reward) over
the root's children. OpenSpiel shuffles the children with the bot's RNG, so exact ties already fall at random,
but two proven wins (or proven draws) go to whichever the search happened to visit more, and two moves with the
same visit count go to the higher summed rollout return. A policy can learn such a bot's habits. Here the search
is OpenSpiel's own (``mcts_search``); only the last step changes: the move is drawn uniformly, from a RNG seeded
by the game, among the children with the best child's proven outcome, or, when the best child is not proven,
among the unproven children with its visit count.
"""

from __future__ import annotations

import random

import pyspiel
from open_spiel.python.algorithms import mcts


def equally_good_actions(root: mcts.SearchNode) -> list[int]:
    """The root's actions rated as good as its best child (sorted): same proven outcome, or same visit count."""
    best = root.best_child()
    if best.outcome is not None:
        value = best.outcome[best.player]
        tied = [c for c in root.children if c.outcome is not None and c.outcome[c.player] == value]
    else:
        tied = [c for c in root.children if c.outcome is None and c.explore_count == best.explore_count]
    return sorted(c.action for c in tied)


class TieBreakingMCTSBot:
    """``bot``'s search, then a uniform draw from ``rng`` among ``equally_good_actions``."""

    def __init__(self, bot: mcts.MCTSBot, rng: random.Random) -> None:
        self.bot = bot
        self.rng = rng

    def step(self, state: pyspiel.State) -> int:
        """The move for the player to move in ``state`` (a decision node)."""
        return self.rng.choice(equally_good_actions(self.bot.mcts_search(state)))
