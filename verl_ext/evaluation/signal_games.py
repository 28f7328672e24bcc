"""Whole-game GRPO groups for ``verl-ext signal``: ``n`` games per full-game training row, played as the run plays
them, scored by the training reward.

A full-game row's GRPO group is ``n`` games of the same deal: the same case, seed and seat, the opponent its seed
draws (``GameSettings.opponent_for``), and bots seeded from that seed. The policy's sampling is the only thing that
differs, so a policy that always names the same moves plays ``n`` identical games and the group teaches nothing.
Each game here is a ``Match`` (``verl_ext/games/match.py``), the loop the training agent loop drives, started from
the row by ``game_setup`` as the agent loop starts it; every policy turn sees its whole conversation with the rows'
system prompt. All games move in lockstep: one generate call per round of turns.

Budgets follow the agent loop (``agent_loop.py``): a reply gets at most ``game.max_tokens_per_turn`` tokens and
at most what is left of the game's response budget (``--max-new-tokens`` = the run's ``MAX_RESPONSE_LENGTH``: the
trained seat's replies and every later message of its conversation, measured on the chat template's rendering);
a reply over what is left is cut there and judged; a game whose next message leaves no room is stopped as
truncated (``response_budget``). A self-play opponent's conversation may grow to ``max_prompt_length`` plus the
response budget, as its context in the agent loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..envs.system_prompt import system_prompt_of, with_system_prompt
from ..games import RECORD_FIELD
from ..games.match import Match, Message, TurnRequest
from ..games.setup import GameSetup, game_setup
from ..seeding import stable_seed
from .backends import prompt_ids
from .signal_report import ScoredReply

# the learner's replies shown for a game in the report's examples (each cut by signal_report.EXAMPLE_CHARS overall)
REPLY_SEPARATOR = "\n--- next turn ---\n"


def is_game_row(row: dict[str, Any]) -> bool:
    """Whether ``row`` (as ``DynamicEnvDataset`` serves it) is played as a whole game."""
    info = row.get("extra_info")
    return isinstance(info, dict) and info.get("mode") == "game"


@dataclass
class _Game:
    """One game of a group and what the check keeps of it."""

    group: int
    sample: int
    setup: GameSetup
    match: Match
    system_prompt: str | None
    replies: list[str] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)  # every answer a policy seat named, in order ("" = none parsed)
    first_prompt_tokens: dict[int, int] = field(default_factory=dict)  # per policy seat
    response_tokens: int = 0  # the trained seat's stream after its first prompt, as last measured


@dataclass(frozen=True)
class GameBudgets:
    """The run's token budgets for whole games (the train script's MAX_RESPONSE_LENGTH and MAX_PROMPT_LENGTH)."""

    response_length: int
    prompt_length: int


@dataclass(frozen=True)
class _Turn:
    """A pending turn: the game, the request, the chat to send and the most tokens its reply may have."""

    game: _Game
    request: TurnRequest
    chat: list[Message]
    room: int


def _start(rows: Sequence[dict[str, Any]], n: int) -> list[_Game]:
    games = []
    for g, row in enumerate(rows):
        setup = game_setup(row["extra_info"])
        system_prompt = system_prompt_of(setup.adapter)
        games += [_Game(g, k, setup, setup.new_match(), system_prompt) for k in range(n)]
    return games


def _turn(game: _Game, request: TurnRequest, tokenizer: Any, budgets: GameBudgets) -> _Turn | None:
    """The pending turn with its room, or None when the game must stop (its budget leaves no room)."""
    chat = with_system_prompt(request.messages, game.system_prompt)
    length = len(prompt_ids(tokenizer, chat))
    first = game.first_prompt_tokens.setdefault(request.player, length)
    if request.learner:
        game.response_tokens = length - first
        room = budgets.response_length - game.response_tokens
    else:
        room = budgets.prompt_length + budgets.response_length - length
    if room <= 0:
        return None
    return _Turn(game, request, chat, min(game.setup.settings.max_tokens_per_turn, room))


def _cut(reply: str, room: int, tokenizer: Any) -> str:
    """The reply cut to ``room`` tokens, as the agent loop's ``max_tokens`` cuts it."""
    ids = tokenizer.encode(reply, add_special_tokens=False)
    return reply if len(ids) <= room else tokenizer.decode(ids[:room], skip_special_tokens=True)


def play_groups(backend: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], n: int, seed: int,
                budgets: GameBudgets, progress: bool) -> list[list[ScoredReply]]:
    """``n`` games per row, each scored by the training reward; one ``ScoredReply`` per game (its ``reply`` is the
    trained seat's replies, ``tokens`` its response tokens: replies plus the later messages of its conversation,
    ``moves`` every answer the policy named: equal ``moves`` in a group are the same game)."""
    from tqdm import tqdm

    games = _start(rows, n)
    active = list(games)
    with tqdm(total=len(games), desc="signal: games", unit="game", disable=not progress) as bar:
        while active:
            turns: list[_Turn] = []
            for game in active:
                request = game.match.next_request()
                if request is None:
                    continue
                turn = _turn(game, request, tokenizer, budgets)
                if turn is None:
                    game.match.truncate("response_budget" if request.learner else "opponent_context")
                else:
                    turns.append(turn)
            for cap in sorted({t.room for t in turns}):  # one call per reply cap (usually just the per-turn one)
                batch = [t for t in turns if t.room == cap]
                seeds = [stable_seed(seed, "signal-game", t.game.group, t.game.sample, t.request.player,
                                     t.request.moves_played, t.request.attempt) for t in batch]
                replies = backend.generate([t.chat for t in batch], seeds, max_new_tokens=cap)
                for turn, reply in zip(batch, replies):
                    reply = _cut(reply, turn.room, tokenizer)
                    if turn.request.learner:
                        turn.game.replies.append(reply)
                    turn.game.match.submit(reply)
                    check = turn.game.match.last_check
                    turn.game.moves.append("" if check is None or check.move is None else check.move)
            still = [g for g in active if not g.match.done]
            bar.update(len(active) - len(still))
            active = still
    return _score(rows, games, n, tokenizer, budgets)


def _score(rows: Sequence[dict[str, Any]], games: list[_Game], n: int, tokenizer: Any,
           budgets: GameBudgets) -> list[list[ScoredReply]]:
    from ..reward import compute_score

    groups: list[list[ScoredReply]] = [[] for _ in rows]
    for game in games:
        row = rows[game.group]
        record = game.match.record
        info = {**row["extra_info"], RECORD_FIELD: record.to_dict()}
        text = REPLY_SEPARATOR.join(game.replies)
        result = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], info)
        tokens = game.response_tokens if game.replies else 0
        if game.replies and record.truncated is None:  # the last reply and its closing token count too
            tokens = _final_tokens(game, tokenizer)
        groups[game.group].append(ScoredReply(reply=text, score=float(result["score"]),
                                              format_ok=bool(result["format_ok"]), valid=bool(result["valid"]),
                                              failed=bool(result["failed"]), tokens=min(tokens,
                                                                                         budgets.response_length),
                                              moves=tuple(game.moves)))
    for group in groups:
        assert len(group) == n, "every row plays n games"
    return groups


def _final_tokens(game: _Game, tokenizer: Any) -> int:
    """The trained seat's response tokens at the end of its game: its whole conversation minus its first prompt."""
    seat = game.setup.seat
    if seat not in game.first_prompt_tokens:
        return 0
    chat = with_system_prompt(game.match.conversation(seat), game.system_prompt)
    rendered = prompt_ids(tokenizer, chat, add_generation_prompt=False)
    return max(0, len(rendered) - game.first_prompt_tokens[seat])
