"""Which tic_tac_toe replies does a model get rejected in arena games against the random bot? (run 4 analysis)

Plays the same 200 games as `verl-ext eval` (seed 0, seats alternating, transformers greedy, 32 new tokens) with
every request and reply recorded, then counts the rejected replies by the cell they name and the first moves
(replies read by the adapter's own strict parser, as the arena reads them).

    python docs/runs/2026-11-23-h100-run4/analysis/arena_rejects.py sft=SFT_HF grpo40=GRPO_HF
"""

from __future__ import annotations

import collections
import re
import sys

from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter, parse_opponents
from verl_ext.evaluation.backends import GenerationSettings
from verl_ext.evaluation.policies import RecordingPolicy, make_policy, parse_model_specs
from verl_ext.mixture import EnvMixture


def main(entries: list[str]) -> None:
    # the eval's env (both games) keeps its seeds; only tic_tac_toe is played
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "seed": 0},
                          "val_tasks_per_case": 200}, where="env")
    adapter = legal_adapter(mixture)
    adapter.cases = lambda: ["tic_tac_toe"]
    for spec in parse_model_specs(entries):
        policy = RecordingPolicy(make_policy(spec, "transformers", GenerationSettings(max_new_tokens=32)))
        match = Arena(adapter, ArenaSettings(games_per_case=200, opponents=tuple(parse_opponents("random")),
                                             seed=0)).play(policy, progress=False)["matches"][0]
        checks = [(request.messages[-1]["content"], adapter.check_move(dict.fromkeys(request.legal_moves, 0), reply))
                  for request, reply in policy.log]
        moves = [(prompt, check.move if check.legal else None) for prompt, check in checks]
        rejected = collections.Counter((check.move or "unparsed")[1:] for _, check in checks if not check.legal)
        openings = collections.Counter(move[1:] for prompt, move in moves
                                       if move and re.search(r"\(move [01]\)", prompt))
        print(f"{spec.name}: W/D/L {match['win']['k']}/{match['draw']['k']}/{match['loss']['k']}, "
              f"{match['forfeit']['k']} forfeits; {sum(rejected.values())} of {len(moves)} replies rejected, "
              f"by cell {rejected.most_common(4)}; first moves {openings.most_common(3)}")
        policy.close()


if __name__ == "__main__":
    main(sys.argv[1:])
