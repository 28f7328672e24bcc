"""How sure is a cold start of its first tic_tac_toe move? The log-probability of each legal first answer
(``<answer>MOVE</answer><|im_end|>``, summed over its tokens and per token) on the first training row of the
tactics run's whole-game settings, and the favourite's share of the legal answers at rollout temperatures T.

    python first_move_logprobs.py /tmp/fit/sft_hf     # the kept fitted cold start, assembled from its parts
"""

from __future__ import annotations

import math
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_ext.dataset import DynamicEnvDataset

ENV = {"held_out_share": 0.2, "openspiel": {"game_types": ["tic_tac_toe"], "seed": 0, "reward_mode": "engine",
                                            "task_mode": "game",
                                            "game": {"opponent": "random:0.5,mcts:50:0.5", "max_tokens_per_turn": 256}}}
MOVES = [f"x({r},{c})" for r in range(3) for c in range(3)]


def main(model_dir: str) -> None:
    torch.set_num_threads(1)
    row = DynamicEnvDataset("env://train", tokenizer=None, config={"env": ENV})[0]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = tok.apply_chat_template(row["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
    totals = {}
    for move in MOVES:
        answer = tok.encode(f"<answer>{move}</answer><|im_end|>", add_special_tokens=False)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + answer])).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, -1)[len(prompt) - 1:]
        per_token = [logprobs[i, token].item() for i, token in enumerate(answer)]
        totals[move] = sum(per_token)
        print(move, round(totals[move], 2), [round(p, 2) for p in per_token])
    favourite = max(totals, key=totals.get)
    for temperature in (1.0, 1.5, 2.0, 3.0, 4.0):
        weights = {m: math.exp(lp / temperature) for m, lp in totals.items()}
        share = weights[favourite] / sum(weights.values())
        print(f"T={temperature}: {favourite} {share:.6f} of the legal answers; a group of 8 opens alike {share ** 8:.4f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/fit/sft_hf")
