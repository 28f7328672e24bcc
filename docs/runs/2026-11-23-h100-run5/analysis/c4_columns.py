"""Which connect_four columns does a model play, and name when rejected, in whole-game arena play? (run 5)

Plays 200 connect_four games against the random bot as `verl-ext eval --suites arena --game-context game
--illegal-retries 1` does (seed 0, seats alternating, transformers greedy, 64 new tokens), records every request
and reply, and counts the columns of all replies and of the rejected ones (replies read by the adapter's own
strict parser, as the arena reads them).

    python docs/runs/2026-11-23-h100-run5/analysis/c4_columns.py sft=SFT_HF grpo=GRPO_HF
"""

from __future__ import annotations

import collections
import sys

from verl_ext.evaluation.arena import Arena, ArenaSettings, legal_adapter, parse_opponents
from verl_ext.evaluation.backends import GenerationSettings
from verl_ext.evaluation.policies import RecordingPolicy, make_policy, parse_model_specs
from verl_ext.mixture import EnvMixture


def main(entries: list[str]) -> None:
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "seed": 0}}, where="env")
    adapter = legal_adapter(mixture)
    adapter.cases = lambda: ["connect_four"]
    settings = ArenaSettings(games_per_case=200, opponents=tuple(parse_opponents("random")), illegal_retries=1,
                             seed=0, context="game")
    for spec in parse_model_specs(entries):
        policy = RecordingPolicy(make_policy(spec, "transformers", GenerationSettings(max_new_tokens=64)))
        match = Arena(adapter, settings).play(policy, progress=False)["matches"][0]
        checks = [adapter.check_move(dict.fromkeys(request.legal_moves, 0), reply) for request, reply in policy.log]
        # a rejected column that is among the legal ones was named with the other player's mark; else it is full
        full = wrong_mark = 0
        for (request, _), check in zip(policy.log, checks):
            if not check.legal and check.move:
                open_columns = {move[-1] for move in request.legal_moves}
                wrong_mark += check.move[-1] in open_columns
                full += check.move[-1] not in open_columns
        played = collections.Counter(check.move for check in checks if check.move)
        rejected = collections.Counter(check.move or "unparsed" for check in checks if not check.legal)
        total = sum(played.values())
        share = ", ".join(f"{move} {count / total:.0%}" for move, count in played.most_common(4))
        print(f"{spec.name}: W/D/L {match['win']['k']}/{match['draw']['k']}/{match['loss']['k']}, "
              f"{match['forfeit']['k']} forfeits, mean game length {match['mean_game_length']:.1f} moves; "
              f"{len(checks)} replies, columns named: {share}; rejected {sum(rejected.values())}: "
              f"{rejected.most_common(4)} ({full} name a full column, {wrong_mark} an open one with the wrong mark)")
        policy.close()


if __name__ == "__main__":
    main(sys.argv[1:])
