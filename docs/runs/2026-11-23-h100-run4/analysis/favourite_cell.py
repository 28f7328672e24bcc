"""How often does a model name tic_tac_toe cell (2,2), and illegally, when it is free, the opponent's or its own?

150 training positions with at most 5 pieces per group (the GRPO run's prompts: seed 0, 10,000 tasks per case),
greedy replies (transformers, 32 new tokens) read by the adapter's own strict parser. Run 4 analysis.

    python docs/runs/2026-11-23-h100-run4/analysis/favourite_cell.py sft=SFT_HF grpo40=GRPO_HF
"""

from __future__ import annotations

import collections
import re
import sys

from verl_ext.evaluation.backends import GenerationSettings
from verl_ext.evaluation.policies import MoveRequest, make_policy, parse_model_specs
from verl_ext.mixture import EnvMixture

LEGAL = re.compile(r"Legal moves.*?: (.*)\n")


def positions_by_owner(mixture: EnvMixture, limit: int = 150,
                       scanned: int = 3000) -> dict[str, list[tuple[list, list[str]]]]:
    groups: dict[str, list] = collections.defaultdict(list)
    taken = 0
    for index, ref in enumerate(mixture.plan("train")[:scanned]):
        prompt = mixture.row(ref, "train", index)["prompt"]
        text = prompt[-1]["content"]
        board = text.split("Current state:\n")[1].split("\n\n")[0].split("\n")
        legal = LEGAL.search(text).group(1).split(", ")
        taken += board[2][2] != "."
        if sum(c != "." for row in board for c in row) > 5:
            continue
        owner = "free" if board[2][2] == "." else ("its own" if board[2][2] == legal[0][0] else "the opponent's")
        groups[owner].append((prompt, legal))
    print(f"(2,2) taken in {taken} of {scanned} training positions")
    return {owner: items[:limit] for owner, items in groups.items()}


def main(entries: list[str]) -> None:
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "seed": 0, "num_tasks_per_case": 10000}},
                         where="env")
    adapter = mixture.adapters["openspiel"]
    groups = positions_by_owner(mixture)
    for spec in parse_model_specs(entries):
        policy = make_policy(spec, "transformers", GenerationSettings(max_new_tokens=32))
        for owner, items in sorted(groups.items()):
            replies = policy.respond([MoveRequest(prompt, legal, 0) for prompt, legal in items])
            checks = [adapter.check_move(dict.fromkeys(legal, 0), reply) for reply, (_, legal) in zip(replies, items)]
            corner = sum(bool(check.move) and check.move.endswith("(2,2)") for check in checks)
            illegal = sum(not check.legal for check in checks)
            print(f"{spec.name}: (2,2) {owner}: n={len(items)}, answers (2,2) {corner / len(items):.0%}, "
                  f"illegal {illegal / len(items):.0%}")
        policy.close()


if __name__ == "__main__":
    main(sys.argv[1:])
