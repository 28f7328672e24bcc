"""Whole games played by the env's engine: SFT demonstrations for full-game training (``TASK_MODE=game``).

A model taught single moves has only ever seen one position per conversation; dropped into a game
conversation (its earlier boards and replies above the current one) it answers from the wrong board. A
demonstration is the conversation the trained seat would have in training, with the engine's move as every
reply: the same ``Match`` (opponent, retries, caps, follow-up prompts) as the agent loop, so the SFT rows
show exactly what a game row shows at rollout time. ``verl-ext export --format sft`` writes one per game row.
"""

from __future__ import annotations

from ..envs.episode import Episode, Opponent
from .match import ACCEPTED, GameRecord, Match, MatchRules, Message


def play_demonstration(episode: Episode, opponent: Opponent, rules: MatchRules) -> tuple[list[Message], GameRecord]:
    """Play ``episode`` to its end with the engine's move for every policy-controlled turn (the trained seat;
    every seat in self-play); return the trained seat's conversation and the game's record."""
    match = Match(episode, opponent, rules)
    while (turn := match.next_request()) is not None:
        move = episode.reference_move()
        if move is None:
            raise ValueError(f"{episode.case!r}: the env has no engine move to demonstrate "
                             f"(player {turn.player}, move {turn.moves_played})")
        verdict = match.submit(f"<answer>{move}</answer>")
        if verdict != ACCEPTED:
            raise RuntimeError(f"{episode.case!r}: the engine's move {move!r} was not accepted ({verdict})")
    return list(match.conversation(episode.seat)), match.record


def demonstration_messages(adapter: object, case: str, seed: int, seat: int) -> list[Message] | None:
    """The SFT conversation of one game row: ``adapter``'s episode of ``(case, seed, seat)`` played by its engine
    under the adapter's ``game`` settings; None when the trained seat never had a turn."""
    settings = adapter.game_settings  # type: ignore[attr-defined]
    episode = adapter.start_episode(case, seed, seat)  # type: ignore[attr-defined]
    messages, _ = play_demonstration(episode, settings.opponent_for(seed), MatchRules.from_settings(settings))
    return messages if any(m["role"] == "assistant" for m in messages) else None
