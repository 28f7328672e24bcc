"""How many tokens whole games cost in the game agent loop, to size ``MAX_RESPONSE_LENGTH`` for a tokenizer.

    python -m verl_ext.games.budget --tokenizer MODEL_OR_TOKENIZER_DIR [--game-types tic_tac_toe,connect_four]

Plays ``--games`` games per case from alternating seats against the random bot, the trained seat answering a
random legal move in the form ``--reply`` (default: a bare ``<answer>MOVE</answer>``, what an SFT model on
exported single-move rows writes), and renders the seat's conversation with the tokenizer's chat template
exactly as the agent loop lays it out: the first prompt is the sample's prompt, everything after it (replies,
later prompts, corrections) its response. Reported per case: first-prompt tokens, response tokens, model
turns, and the share of games that would fit ``--response-length``. Games that end before the trained seat moves
(a poker hand folded by the player before it) cost nothing to train on and are counted apart.
"""

from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass
from typing import Any

from ..envs.episode import Opponent
from ..envs.registry import make_env
from ..seeding import stable_seed
from .match import Match, MatchRules


@dataclass(frozen=True)
class GameCost:
    """Tokens of one played game from the trained seat."""

    prompt_tokens: int
    response_tokens: int
    model_turns: int


def _ids(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def game_cost(adapter: Any, case: str, seed: int, seat: int, tokenizer: Any, reply: str,
              compact: bool = False) -> GameCost | None:
    """Play one game against the random bot (random legal replies) and count its tokens; None when the game
    ended before the seat had a turn."""
    episode = adapter.start_episode(case, seed, seat)
    match = Match(episode, Opponent("random"), MatchRules(compact_followups=compact))
    rng = random.Random(stable_seed(seed, "budget", seat))
    while (turn := match.next_request()) is not None:
        match.submit(reply.format(move=rng.choice(turn.legal_moves)))
    conversation = list(match.conversation(seat))
    if not conversation:
        return None
    prompt = _ids(tokenizer, conversation[:1], True)
    full = _ids(tokenizer, conversation, False)
    return GameCost(len(prompt), len(full) - len(prompt), match.record.model_turns)


def measure(game_types: list[str], tokenizer: Any, games: int = 20, reply: str = "<answer>{move}</answer>",
            compact: bool = False, response_length: int = 3584) -> list[dict[str, Any]]:
    """Per case: mean/max first-prompt and response tokens, mean/max model turns, share of games that fit."""
    adapter = make_env("openspiel", {"game_types": game_types, "game": {
        "followup_prompt": "compact" if compact else "full"}})
    rows = []
    for case in adapter.cases():
        players = adapter.start_episode(case, 0, 0).num_players
        played = [game_cost(adapter, case, i, i % players, tokenizer, reply, compact) for i in range(games)]
        costs = [c for c in played if c is not None]
        responses = [c.response_tokens for c in costs]
        rows.append({
            "case": case,
            "games": len(costs),
            "games_without_a_turn": games - len(costs),
            "prompt_tokens_mean": statistics.fmean(c.prompt_tokens for c in costs),
            "prompt_tokens_max": max(c.prompt_tokens for c in costs),
            "response_tokens_mean": statistics.fmean(responses),
            "response_tokens_max": max(responses),
            "model_turns_mean": statistics.fmean(c.model_turns for c in costs),
            "model_turns_max": max(c.model_turns for c in costs),
            "fit_share": sum(r <= response_length for r in responses) / len(costs),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.games.budget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="model or tokenizer folder (or hub id) with a chat template")
    parser.add_argument("--game-types", default="tic_tac_toe,connect_four")
    parser.add_argument("--games", type=int, default=20, help="games per case (seats alternate)")
    parser.add_argument("--reply", default="<answer>{move}</answer>", help="reply pattern; {move} = a legal move")
    parser.add_argument("--followup-prompt", choices=("full", "compact"), default="full")
    parser.add_argument("--response-length", type=int, default=3584, help="budget to check (MAX_RESPONSE_LENGTH)")
    args = parser.parse_args(argv)
    if "{move}" not in args.reply or args.games <= 0:
        parser.error("--reply must contain {move} and --games must be > 0")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    rows = measure([t.strip() for t in args.game_types.split(",") if t.strip()], tokenizer, args.games, args.reply,
                   args.followup_prompt == "compact", args.response_length)
    print("| case | games | first prompt (mean / max) | response (mean / max) | model turns (mean / max) | "
          f"fit {args.response_length} |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        skipped = f" (+{r['games_without_a_turn']} without a turn)" if r["games_without_a_turn"] else ""
        print(f"| {r['case']} | {r['games']}{skipped} | {r['prompt_tokens_mean']:.0f} / {r['prompt_tokens_max']} | "
              f"{r['response_tokens_mean']:.0f} / {r['response_tokens_max']} | {r['model_turns_mean']:.1f} / "
              f"{r['model_turns_max']} | {100 * r['fit_share']:.0f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
