"""The reward of a played game and its per-sample metrics (the same keys for single-move rows, as zeros)."""

from __future__ import annotations

from dataclasses import dataclass

from ..envs.game_settings import GameSettings
from .match import GameRecord

# Per-sample metrics every reward call returns (verl takes the metric keys from the first sample of a batch).
GAME_METRIC_KEYS = ("game", "win", "draw", "loss", "forfeit", "truncated", "game_moves", "model_turns",
                    "model_tokens", "rejected_replies", "value_turns", "values_kept")


@dataclass(frozen=True)
class GameScore:
    """``score = (1 - fw - lw - tw - vw) * outcome + fw * format_rate + lw * legal_rate
    + (tw * tactics_rate + vw * value_rate) * played_out`` (fw/lw/tw/vw: format/legal/tactics/value weight, vw 0 in
    a game that cannot be valued exactly; ``played_out``: the game ended by its rules, not by a forfeit or a cap)."""

    score: float
    outcome: float
    format_rate: float
    legal_rate: float
    tactics_rate: float
    value_rate: float = 1.0


def outcome_value(record: GameRecord, truncated_reward: float) -> float:
    """The seat's normalised return (win 1, draw 0.5, loss 0); a forfeit 0; a truncated game ``truncated_reward``."""
    if record.forfeit is not None:
        return 0.0
    if record.truncated is not None or record.normalised_return is None:
        return truncated_reward
    return min(1.0, max(0.0, float(record.normalised_return)))


def tactics_rate(record: GameRecord) -> float:
    """The share of the policy's turns with a one-ply tactic (a win to take, a threat to block) that it played
    right; 1.0 in a game without such a turn (nothing missed: meeting a threat is not better than not facing one)."""
    chances = record.win_chances + record.block_chances
    return (record.wins_taken + record.blocks_made) / chances if chances else 1.0


def value_rate(record: GameRecord) -> float:
    """The share of the policy's valued turns whose move kept the position's value under best play (a forfeited
    turn kept nothing); 1.0 without a valued turn."""
    return record.values_kept / record.value_turns if record.value_turns else 1.0


def played_out(record: GameRecord) -> bool:
    """Whether the game ended by its own rules: not forfeited, not stopped by a cap or the token budget."""
    return record.forfeit is None and record.truncated is None and record.result is not None


def score_game(record: GameRecord, settings: GameSettings, valued: bool = False) -> GameScore:
    """The training reward of a finished (or truncated) game, in [0, 1]; ``valued``: the game can be valued exactly
    (``OpenSpielAdapter.values_exactly``), so ``settings.value_weight`` pays the moves that kept the value (else
    that share pays the outcome).

    The tactics share pays only a game played to its end. It paid every game once, and GRPO found it: a game
    forfeited before any one-ply chance kept the whole share (0.30 against ~0.05 for a loss played out) and
    tic_tac_toe forfeits rose from 0 to 21 % of the games (docs/runs/2026-11-28-h200-boardgames-tactics/). Now
    ending a game early never pays more than playing it out, and a lost game still pays for the blocks it made."""
    turns = max(1, record.model_turns)
    format_rate = record.format_ok / turns if record.model_turns else 0.0
    legal_rate = record.model_moves / turns if record.model_turns else 0.0
    tactics, values = tactics_rate(record), value_rate(record)
    outcome = outcome_value(record, settings.truncated_reward)
    fw, lw, tw = settings.format_weight, settings.legal_weight, settings.tactics_weight
    vw = settings.value_weight if valued else 0.0
    score = (1.0 - fw - lw - tw - vw) * outcome + fw * format_rate + lw * legal_rate
    if played_out(record):
        score += tw * tactics + vw * values
    return GameScore(min(1.0, max(0.0, score)), outcome, format_rate, legal_rate, tactics, values)


def game_metrics(record: GameRecord | None) -> dict[str, float]:
    """``GAME_METRIC_KEYS`` for one sample: the game's counts and outcome flags, all 0 for a single-move row.

    win/draw/loss follow the game's rules (a forfeit is a loss and also counts in ``forfeit``); a truncated
    game counts in ``truncated`` only, so win + draw + loss + truncated = 1 per game.
    """
    if record is None:
        return {key: 0.0 for key in GAME_METRIC_KEYS}
    outcome = record.outcome
    return {
        "game": 1.0,
        "win": float(outcome == "win"),
        "draw": float(outcome == "draw"),
        "loss": float(outcome == "loss"),
        "forfeit": float(record.forfeit is not None),
        "truncated": float(outcome == "truncated"),
        "game_moves": float(record.moves),
        "model_turns": float(record.model_turns),
        "model_tokens": float(record.model_tokens),
        "rejected_replies": float(record.rejected),
        "value_turns": float(record.value_turns),
        "values_kept": float(record.values_kept),
    }
