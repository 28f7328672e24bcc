"""A full OpenSpiel game as an ``Episode`` (see ``episode.py``): seeded chance, seeded bots, strict replies."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import numpy as np
import pyspiel
from open_spiel.python.bots.policy import PolicyBot
from open_spiel.python.bots.uniform_random import UniformRandomBot

from ..seeding import stable_seed
from .answer import move_answer_key
from .bot_ties import TieBreakingMCTSBot
from .cfr_policy import DEFAULT_SOLVER, cfr_policy
from .episode import MoveCheck, Opponent
from .exact_values import best_actions
from .openspiel_rules import legal_move_actions, load_game, normalised_return
from .tactics import one_ply, tactic_flags, tactical_move_texts

if TYPE_CHECKING:
    from .openspiel_env import OpenSpielAdapter


class OpenSpielEpisode:
    """One game of ``case`` from the initial state; everything random in it follows from ``seed``.

    Chance outcomes (cards, dice) come from ``random.Random(seed)``; the bot of player ``p`` is seeded with
    ``stable_seed(seed, "bot", p)`` (OpenSpiel's ``UniformRandomBot``, ``MCTSBot`` with the adapter's rollout
    settings, or ``PolicyBot`` sampling a cached CFR+ average policy, ``cfr_policy.py``; the MCTS bot draws among
    equally rated moves from ``stable_seed(seed, "bot_ties", p)``, see ``bot_ties.py``); fallback random moves have
    their own stream. The same seed and the same replies replay the same game. Prompts are the adapter's
    single-move ``position_prompt`` for the player to move (its own view in imperfect-information games).
    """

    def __init__(self, adapter: OpenSpielAdapter, case: str, seed: int, seat: int) -> None:
        self.adapter = adapter
        self.case = case
        self.seed = int(seed)
        self.game = load_game(case)
        self.num_players = self.game.num_players()
        if not 0 <= seat < self.num_players:
            raise ValueError(f"seat {seat} is not a player of {case!r} ({self.num_players} players)")
        self.seat = seat
        self.state = self.game.new_initial_state()
        self._chance = random.Random(self.seed)
        self._fallback = random.Random(stable_seed(self.seed, "fallback"))
        self._bots: dict[tuple[int, str], pyspiel.Bot | TieBreakingMCTSBot] = {}
        self._moves = 0
        self._resolve_chance()

    def _resolve_chance(self) -> None:
        while self.state.is_chance_node():
            actions, probs = zip(*self.state.chance_outcomes())
            self.state.apply_action(self._chance.choices(actions, weights=probs, k=1)[0])

    def _apply(self, action: int) -> None:
        self.state.apply_action(action)
        self._moves += 1
        self._resolve_chance()

    def is_over(self) -> bool:
        return self.state.is_terminal()

    def current_player(self) -> int:
        return self.state.current_player()

    def moves_played(self) -> int:
        return self._moves

    def prompt(self, compact: bool = False) -> str:
        return self.adapter.position_prompt(self.case, self.state, compact=compact)

    def legal_moves(self) -> tuple[str, ...]:
        return tuple(legal_move_actions(self.state))

    def check(self, reply: object) -> MoveCheck:
        if self.state.is_terminal():
            return MoveCheck(None, False, "game_over")
        return self.adapter.check_move(legal_move_actions(self.state), reply)

    def play(self, move: str) -> None:
        action = legal_move_actions(self.state).get(move)
        if action is None:
            raise ValueError(f"{move!r} is not a legal move of player {self.current_player()} in {self.case!r}")
        self._apply(action)

    def answer_key(self, move: str) -> str:
        return move_answer_key(legal_move_actions(self.state), move)

    def move_tactics(self, move: str | None) -> dict[str, float] | None:
        if self.state.is_terminal():
            return None
        try:
            tactics = one_ply(self.case, self.state.serialize())
            if tactics is None:
                return None
            return tactic_flags(tactics, None if move is None else legal_move_actions(self.state).get(move))
        except Exception:  # noqa: BLE001 - a metric and a reward term: a game that cannot be analysed has none
            return None

    def move_keeps_value(self, move: str | None) -> bool | None:
        try:
            best = best_actions(self.case, self.state)  # before the move lookup: None for a game too large to search
            if best is None:
                return None
            return move is not None and legal_move_actions(self.state).get(move) in best
        except Exception:  # noqa: BLE001 - a metric and a reward term: a game that cannot be valued has none
            return None

    def tactical_moves(self) -> tuple[str, ...]:
        if self.state.is_terminal():
            return ()
        try:
            return tactical_move_texts(self.case, self.state.serialize())
        except Exception:  # noqa: BLE001 - a baseline's hint: a position that cannot be analysed has none
            return ()

    def _bot(self, player: int, opponent: Opponent) -> pyspiel.Bot | TieBreakingMCTSBot:
        key = (player, opponent.label)
        if key not in self._bots:
            seed = stable_seed(self.seed, "bot", player)
            if opponent.kind == "random":
                self._bots[key] = UniformRandomBot(player, np.random.RandomState(seed))
            elif opponent.kind == "mcts":
                bot = self.adapter._mcts_bot(self.game, seed, opponent.simulations)
                ties = random.Random(stable_seed(self.seed, "bot_ties", player))
                self._bots[key] = TieBreakingMCTSBot(bot, ties)
            elif opponent.kind == "cfr":  # samples OpenSpiel's CFR+ average policy at its own information state
                solved = cfr_policy(self.case, DEFAULT_SOLVER, opponent.iterations)
                self._bots[key] = PolicyBot(player, np.random.RandomState(seed), solved.policy)
            else:
                raise ValueError(f"opponent {opponent.label!r} is not a bot")
        return self._bots[key]

    def play_bot(self, opponent: Opponent) -> str:
        player = self.current_player()
        action = self._bot(player, opponent).step(self.state)
        move = self.state.action_to_string(player, action)
        self._apply(action)
        return move

    def play_random(self) -> str:
        player = self.current_player()
        action = self._fallback.choice(self.state.legal_actions(player))
        move = self.state.action_to_string(player, action)
        self._apply(action)
        return move

    def reference_move(self) -> str | None:
        """The adapter's reference move, as single-move SFT answers (``OpenSpielAdapter.reference_move``): the
        engine's move in perfect-information games; in poker a draw from the CFR+ average policy at the player's
        information state, in Hanabi a random legal move (seeded by the game and the move number)."""
        if self.state.is_terminal():
            return None
        return self.adapter.reference_move(self.case, self.state, stable_seed(self.seed, "reference", self._moves))

    def returns(self) -> list[float]:
        return [float(r) for r in self.state.returns()]

    def normalised_return(self, player: int) -> float:
        return normalised_return(self.game, self.returns()[player])
