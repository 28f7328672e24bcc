"""The one game loop: who moves, what each policy-controlled player sees, and what a reply does.

Training (``agent_loop.py``: async, one game per sample, replies from verl's rollout server) and the eval
arena (``verl_ext/evaluation/arena.py``: many games in lockstep, replies from a batch policy) both drive a
``Match``; neither has rules of its own. The driver asks ``next_request()`` (chance and bot moves are played
inside it; ``None`` = the game is over), gets a reply for that player, and hands it to ``submit()``:

- a legal move is played;
- an unparseable or illegal reply is shown back with a short correction message up to
  ``illegal_retries`` times at that turn; after that the trained policy forfeits (a loss), while a
  self-play opponent gets a seeded random legal move instead (so its mistakes do not hand out wins);
- ``max_moves`` (moves of all players) stops the game as truncated; a driver stops it as truncated
  too when its token budget runs out (``truncate``).

Each policy-controlled player keeps its own conversation: its first prompt, its replies, then one user
message per later turn (the position prompt, compact if the rules say so) or per correction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..envs.episode import Episode, MoveCheck, Opponent
from ..envs.game_settings import GameSettings

# The correction after a rejected reply names the rejected answer and lists the legal moves again, right where
# the model answers next. Told only the reason, SmolLM2 repeated its rejected answer word for word in every kept
# transcript, and a connect_four cold start forfeited 22.5 % of its games against random after two rejected replies
# (docs/runs/2026-11-27-h200x2-smollm2-lr1e4-wholegame/).
# The answer is model output: it is shown cut to SHOWN_ANSWER_CHARS; games with more than LISTED_MOVES legal moves
# (Go, Hex) point back at the position prompt's list instead.
SHOWN_ANSWER_CHARS = 24
LISTED_MOVES = 32
ACCEPTED, RETRY, FORFEIT, FALLBACK = "accepted", "retry", "forfeit", "fallback"
Message = dict[str, str]


def correction_text(check: MoveCheck, legal_moves: Sequence[str]) -> str:
    """The user message after a rejected reply: why, the rejected answer (if one was parsed) and the legal moves."""
    reason = check.reason
    if check.move is not None:
        answer = check.move if len(check.move) <= SHOWN_ANSWER_CHARS else check.move[:SHOWN_ANSWER_CHARS] + "..."
        reason = f"{reason}: {answer} is not a legal move now"
    if legal_moves and len(legal_moves) <= LISTED_MOVES:
        choose = f"Legal moves: {', '.join(legal_moves)}. End your reply with exactly one of them"
    else:
        choose = "End your reply with exactly one legal move from the list"
    return f"That reply was rejected ({reason}). {choose}, in the form <answer>MOVE</answer>."


@dataclass(frozen=True)
class MatchRules:
    """The rules of play a match enforces (the reward terms live in ``GameSettings``)."""

    illegal_retries: int = 0
    max_moves: int = 0
    compact_followups: bool = False

    @classmethod
    def from_settings(cls, settings: GameSettings) -> MatchRules:
        return cls(settings.illegal_retries, settings.max_moves, settings.followup_prompt == "compact")


@dataclass(frozen=True)
class TurnRequest:
    """A policy-controlled player must reply.

    ``messages`` is the player's whole conversation so far (it ends with a user message); ``turn_messages``
    only this turn's: the full position prompt, then any rejected replies with their corrections.
    """

    player: int
    learner: bool
    attempt: int
    messages: tuple[Message, ...]
    turn_messages: tuple[Message, ...]
    legal_moves: tuple[str, ...]
    moves_played: int


@dataclass
class GameRecord:
    """What happened in one game, from the trained policy's seat. JSON-ready via ``to_dict``."""

    case: str
    seed: int
    seat: int
    opponent: str
    result: str | None = None         # win / draw / loss (by the rules or a forfeit); None while running or truncated
    forfeit: str | None = None        # the rejection reason that lost the game
    truncated: str | None = None      # why the game was stopped: move_cap, response_budget, ...
    returns: list[float] | None = None
    normalised_return: float | None = None  # the seat's return in [0, 1], when the game ended by its rules
    moves: int = 0                    # moves of all players
    model_turns: int = 0              # replies of the trained policy, rejected ones included
    model_moves: int = 0              # its moves played (= legal replies)
    format_ok: int = 0                # its well-formed replies
    rejected: int = 0
    retries: int = 0
    model_tokens: int = 0             # tokens it generated (set by the training driver)
    opponent_replies: int = 0         # self-play only
    opponent_rejected: int = 0
    opponent_fallbacks: int = 0
    # the policy's first reply where it made the game's first decision (no player had moved yet, so every game of
    # its GRPO group, which shares the deal, starts from this position): the canonical answer of the legal move it
    # named (Episode.answer_key, as single moves count it), "" for a rejected reply; None where another player
    # moved first. The per-step collapse metrics of whole games read it.
    opening_move: str | None = None
    # one-ply tactics of the policy's turns (envs/tactics.py, two-player games of perfect information): turns with
    # a win on the board / where it took one, turns with a threat to block / where it blocked; a turn it forfeited
    # counts as a chance missed. The reward's ``game.tactics_weight`` pays the share played right.
    win_chances: int = 0
    wins_taken: int = 0
    block_chances: int = 0
    blocks_made: int = 0
    # the policy's turns in a game small enough to value exactly (envs/exact_values.py: tic_tac_toe) / those whose
    # move kept the position's value under best play (a forfeited turn counts as not kept). The reward's
    # ``game.value_weight`` pays the share kept.
    value_turns: int = 0
    values_kept: int = 0
    # per reply of the trained policy, in order (rejected replies included), in a game valued exactly: 1 where the
    # move met the credit's target (``credit_target_met``: kept the position's value and played the one-ply tactic
    # where there was one), 0 where it did not or the reply was rejected; empty in other games. With
    # ``move_credit`` (the row's ``game.move_credit``, set by the agent loop) above 0, verl_ext/patches/move_credit.py
    # turns them into an advantage per reply.
    reply_values: list[int] = field(default_factory=list)
    move_credit: float = 0.0

    @property
    def done(self) -> bool:
        return self.result is not None or self.truncated is not None

    @property
    def outcome(self) -> str:
        """``win``, ``draw``, ``loss`` (forfeits included), ``truncated``, or ``running``."""
        if self.truncated is not None:
            return "truncated"
        return self.result or "running"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GameRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def result_from_returns(returns: list[float], seat: int) -> str:
    """``win`` / ``draw`` / ``loss``: ``seat``'s return above / equal to / below the best other player's."""
    mine = returns[seat]
    best_other = max((r for p, r in enumerate(returns) if p != seat), default=mine)
    return "win" if mine > best_other else "draw" if mine == best_other else "loss"


def credit_target_met(kept: bool, flags: Mapping[str, float] | None) -> bool:
    """Whether a reply earns credit per move (``GameRecord.reply_values``): it kept the position's value under best
    play (``kept``) and played the one-ply tactic where the position had one (``flags``: ``Episode.move_tactics``):
    took a win on the board, or else did not let a threat win at once.

    Why both: on the GPU the value alone taught a policy to keep forced wins for later (wins on the board taken
    83.0 -> 64.2 % against random, docs/runs/2026-11-29-h200x2-boardgames-credit-100/), and in a position already
    lost every move keeps the value, so leaving a single threat open was paid like blocking it."""
    if not kept:
        return False
    if not flags:
        return True
    if flags.get("win_chance"):
        return bool(flags.get("win_taken"))
    return not flags.get("block_chance") or bool(flags.get("blocked"))


@dataclass
class _Turn:
    player: int
    attempt: int = 0
    messages: list[Message] = field(default_factory=list)


class Match:
    """A game between the trained policy (seat ``episode.seat``) and ``opponent`` in every other seat."""

    def __init__(self, episode: Episode, opponent: Opponent, rules: MatchRules) -> None:
        self.episode = episode
        self.opponent = opponent
        self.rules = rules
        self.record = GameRecord(episode.case, episode.seed, episode.seat, opponent.label)
        self._conversations: dict[int, list[Message]] = defaultdict(list)
        self._turns_taken: dict[int, int] = defaultdict(int)
        self._turn: _Turn | None = None
        self.last_check: MoveCheck | None = None  # the check of the last submitted reply (the arena reports rejections)

    @property
    def done(self) -> bool:
        return self.record.done

    def controls(self, player: int) -> bool:
        """Whether ``player``'s moves come from the policy (the trained seat, and every seat in self-play)."""
        return player == self.episode.seat or not self.opponent.is_bot

    def conversation(self, player: int) -> tuple[Message, ...]:
        return tuple(self._conversations[player])

    def next_request(self) -> TurnRequest | None:
        """Play chance and bot moves until a policy-controlled player must reply; None once the game is over.

        Bots search here (OpenSpiel MCTS can take a while): async drivers call this in an executor.
        """
        if self.done:
            return None
        if self._turn is None:
            episode = self.episode
            while True:
                if episode.is_over():
                    self._finish_by_rules()
                    return None
                if self.rules.max_moves and episode.moves_played() >= self.rules.max_moves:
                    self.truncate("move_cap")
                    return None
                if self.controls(episode.current_player()):
                    break
                episode.play_bot(self.opponent)
                self.record.moves = episode.moves_played()
            player = episode.current_player()
            compact = self.rules.compact_followups and self._turns_taken[player] > 0
            self._conversations[player].append({"role": "user", "content": episode.prompt(compact)})
            self._turn = _Turn(player, 0, [{"role": "user", "content": episode.prompt()}])
        return self._request()

    def _request(self) -> TurnRequest:
        turn = self._turn
        assert turn is not None
        return TurnRequest(turn.player, turn.player == self.episode.seat, turn.attempt,
                           tuple(self._conversations[turn.player]), tuple(turn.messages),
                           self.episode.legal_moves(), self.episode.moves_played())

    def submit(self, reply: object) -> str:
        """Apply the awaited player's ``reply`` (any object); returns accepted, retry, forfeit or fallback."""
        turn = self._turn
        if turn is None or self.done:
            raise RuntimeError("submit() without a pending request; call next_request() first")
        record, learner = self.record, turn.player == self.episode.seat
        check = self.last_check = self.episode.check(reply)
        if learner and record.model_turns == 0 and self.episode.moves_played() == 0:
            record.opening_move = self.episode.answer_key(check.move) if check.legal and check.move is not None else ""
        if learner:
            record.model_turns += 1
            record.format_ok += int(check.format_ok)
        else:
            record.opponent_replies += 1
        said: Message = {"role": "assistant", "content": reply if isinstance(reply, str) else ""}
        self._conversations[turn.player].append(said)
        turn.messages.append(said)
        played = check.move if check.legal else None
        kept = self.episode.move_keeps_value(played) if learner else None
        flags = self.episode.move_tactics(played) if learner else None
        if kept is not None:
            record.reply_values.append(int(credit_target_met(kept, flags)))
        if check.legal and check.move is not None:
            if learner:
                self._count_tactics(flags, kept)
            self.episode.play(check.move)
            self._end_turn(turn.player)
            if learner:
                record.model_moves += 1
            return ACCEPTED
        if learner:
            record.rejected += 1
        else:
            record.opponent_rejected += 1
        if turn.attempt < self.rules.illegal_retries:
            turn.attempt += 1
            if learner:
                record.retries += 1
            correction: Message = {"role": "user", "content": correction_text(check, self.episode.legal_moves())}
            self._conversations[turn.player].append(correction)
            turn.messages.append(correction)
            return RETRY
        if learner:
            self._count_tactics(flags, kept)
            self._turn = None
            record.result, record.forfeit = "loss", check.reason
            return FORFEIT
        self.episode.play_random()
        record.opponent_fallbacks += 1
        self._end_turn(turn.player)
        return FALLBACK

    def _count_tactics(self, flags: dict[str, float] | None, kept: bool | None) -> None:
        """Add the ending turn's one-ply tactics (``Episode.move_tactics`` of the move played, or of None for a
        forfeit) and whether it kept the value (``Episode.move_keeps_value`` of it) to the record."""
        record = self.record
        if flags:
            record.win_chances += int(flags["win_chance"])
            record.wins_taken += int(flags["win_taken"])
            record.block_chances += int(flags["block_chance"])
            record.blocks_made += int(flags["blocked"])
        if kept is not None:
            record.value_turns += 1
            record.values_kept += int(kept)

    def _end_turn(self, player: int) -> None:
        self._turns_taken[player] += 1
        self._turn = None
        self.record.moves = self.episode.moves_played()

    def truncate(self, reason: str) -> None:
        """Stop an unfinished game (a cap or a driver's budget); it is scored as configured, never as a win."""
        if not self.done:
            self.record.truncated = reason
            self._turn = None

    def _finish_by_rules(self) -> None:
        episode, record = self.episode, self.record
        returns = episode.returns()
        record.result = result_from_returns(returns, episode.seat)
        record.returns = returns
        record.normalised_return = episode.normalised_return(episode.seat)
        record.moves = episode.moves_played()
