"""Whole games played for SFT demonstrations of full-game training (``TASK_MODE=game``).

A model taught single moves has only ever seen one position per conversation; dropped into a game
conversation (its earlier boards and replies above the current one) it answers from the wrong board, or repeats
one of its earlier answers. A demonstration is the conversation the trained seat would have in training: the same
``Match`` (opponent, retries, caps, follow-up prompts) as the agent loop, so the SFT rows show exactly what a game
row shows at rollout time. A move chooser supplies every policy-controlled reply: the env's engine move
(``engine_move``, ``--answers reference``) or a seeded uniformly random legal move (``random_moves``,
``--answers random|rules``: the format and the rules in the game context, no strategy).
``verl-ext export --format sft`` writes one per game row.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..envs.episode import Episode, Opponent
from .match import ACCEPTED, GameRecord, Match, MatchRules, Message, TurnRequest

# the move a policy-controlled player makes at ``turn`` (None: the chooser has none to offer)
MoveChooser = Callable[[Episode, TurnRequest], str | None]


def engine_move(episode: Episode, turn: TurnRequest) -> str | None:
    """The env's reference move for the player to move (an engine's move, or a CFR+ policy's)."""
    return episode.reference_move()


def random_moves(seed: int) -> MoveChooser:
    """A chooser of uniformly random legal moves, drawn in turn order from ``random.Random(seed)``: the same game
    for the same seed."""
    rng = random.Random(seed)

    def choose(episode: Episode, turn: TurnRequest) -> str | None:
        return rng.choice(turn.legal_moves) if turn.legal_moves else None

    return choose


def play_demonstration(episode: Episode, opponent: Opponent, rules: MatchRules,
                       choose: MoveChooser = engine_move) -> tuple[list[Message], GameRecord]:
    """Play ``episode`` to its end with ``choose``'s move for every policy-controlled turn (the trained seat;
    every seat in self-play); return the trained seat's conversation and the game's record."""
    match = Match(episode, opponent, rules)
    play_to_the_end(match, choose)
    return list(match.conversation(episode.seat)), match.record


def play_to_the_end(match: Match, choose: MoveChooser) -> None:
    """Play ``match`` to its end with ``choose``'s move for every policy-controlled turn; a move it cannot offer or
    that the match does not accept raises."""
    episode = match.episode
    while (turn := match.next_request()) is not None:
        move = choose(episode, turn)
        if move is None:
            raise ValueError(f"{episode.case!r}: no move to demonstrate for player {turn.player} at move "
                             f"{turn.moves_played} (legal: {list(turn.legal_moves)})")
        verdict = match.submit(f"<answer>{move}</answer>")
        if verdict != ACCEPTED:
            raise RuntimeError(f"{episode.case!r}: the demonstrated move {move!r} was not accepted ({verdict})")


def demonstration_messages(adapter: object, case: str, seed: int, seat: int,
                           choose: MoveChooser = engine_move) -> list[Message] | None:
    """The SFT conversation of one game row: ``adapter``'s episode of ``(case, seed, seat)`` played with
    ``choose``'s moves under the adapter's ``game`` settings; None when the trained seat never had a turn."""
    settings = adapter.game_settings  # type: ignore[attr-defined]
    episode = adapter.start_episode(case, seed, seat)  # type: ignore[attr-defined]
    opponent = settings.opponent_for(seed, case)
    messages, _ = play_demonstration(episode, opponent, MatchRules.from_settings(settings), choose)
    return messages if any(m["role"] == "assistant" for m in messages) else None
