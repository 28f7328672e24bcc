"""Where does a cold start put its probability in whole-game context: on the spread teacher's good moves, or beyond?

For each of ``--games`` validation deals of the tactics run's whole-game rows (tic_tac_toe), the spread teacher
(``openspiel.reference_margin`` 0.1) plays the trained seat's game as the SFT rows show it; at every one of its
turns the model is given the conversation so far (teacher-forced) and every legal answer
(``<answer>MOVE</answer><|im_end|>``) is scored. Reported per model: the mean probability (at T = 1, over the legal
answers) on the teacher's good moves, on moves that keep the exact value, and at turns where the opponent threatens
to win, on the blocks.

    python good_move_mass.py /tmp/fit/sft_hf /tmp/probe/sft_hf [--games 16]
"""

from __future__ import annotations

import argparse
import random

import torch

from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.openspiel_env import OpenSpielAdapter, OpenSpielConfig
from verl_ext.envs.openspiel_rules import legal_move_actions
from verl_ext.envs.tactics import one_ply
from verl_ext.evaluation.backends import GenerationSettings, TransformersBackend
from verl_ext.evaluation.exploitability import softmax
from verl_ext.games.match import Match, MatchRules

CASE = "tic_tac_toe"


def turns(games: int) -> list[tuple[list[dict[str, str]], list[str], set[str], set[str], set[str]]]:
    """(conversation so far, legal moves, good moves, value-keeping moves, blocks) at each teacher turn."""
    adapter = OpenSpielAdapter(OpenSpielConfig(game_types=[CASE], reward_mode="engine", task_mode="game",
                                               reference_margin=0.1,
                                               game={"opponent": "random:0.5,mcts:50:0.5"}))
    settings, out = adapter.game_settings, []
    for game in range(games):
        seed, seat = 90_000 + game, game % 2
        episode = adapter.start_episode(CASE, seed, seat)
        match = Match(episode, settings.opponent_for(seed, CASE), MatchRules.from_settings(settings))
        rng = random.Random(seed)
        while (request := match.next_request()) is not None:
            state = episode.state
            actions = legal_move_actions(state)
            good = set(adapter.good_moves(CASE, state.serialize(), 0.1))
            keeping = {m for m, a in actions.items() if a in (best_actions(CASE, state) or ())}
            tactics = one_ply(CASE, state.serialize())
            blocks = set()
            if tactics is not None and tactics.losing and not tactics.winning:
                blocks = {m for m, a in actions.items() if a not in tactics.losing}
            out.append((list(request.messages), list(request.legal_moves), good, keeping, blocks))
            match.submit(f"<answer>{rng.choice(sorted(good))}</answer>")
    return out


def mass(model_dir: str, data: list) -> dict[str, tuple[float, int]]:
    """Per kind of move, the mean probability (T = 1, over the legal answers) the model gives it, and the turns."""
    backend = TransformersBackend(model_dir, None, GenerationSettings(device="cpu", dtype="float32", batch_size=16))
    sums: dict[str, list[float]] = {"good": [], "keeps_value": [], "blocks": []}
    for messages, legal, good, keeping, blocks in data:
        # the answer as the model ends it: the reply and the end of its turn
        logprobs = backend.continuation_logprobs([messages] * len(legal),
                                                 [f"<answer>{move}</answer><|im_end|>" for move in legal])
        p = dict(zip(legal, softmax(logprobs), strict=True))
        sums["good"].append(sum(p[m] for m in good))
        sums["keeps_value"].append(sum(p[m] for m in keeping))
        if blocks:
            sums["blocks"].append(sum(p[m] for m in blocks))
    backend.close()
    return {k: (sum(v) / len(v), len(v)) for k, v in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--games", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(2)
    data = turns(args.games)
    for model_dir in args.models:
        result = mass(model_dir, data)
        print(model_dir, {k: f"{m:.3f} over {n} turns" for k, (m, n) in result.items()}, flush=True)


if __name__ == "__main__":
    main()
