"""What a collapsed policy scores: the held-out engine score of "always play move M" for every move M.

A GRPO run that collapses to favourite moves can still raise the held-out engine score a little, because some
moves are good in most positions (the centre column of connect_four). This prints, per game of the env section,
the engine score of each fixed-move policy on the validation positions (a position where M is illegal counts as
the random legal mover's score there, which is what a policy that falls back would get on average), beside the
uniform random legal mover and the engine's own best move (1.0 by construction). A trained model whose greedy
held-out score equals the best fixed move's has learnt a favourite, not the positions.

    python bench/learning/fixed_move_baseline.py \\
        --set 'openspiel.game_types=[tic_tac_toe,connect_four]' --set openspiel.reward_mode=engine \\
        --set openspiel.num_tasks_per_case=5000 --set held_out_share=0.2 --set val_tasks_per_case=500 \\
        --out fixed_moves.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from group_signal import run_cli  # beside this script (python puts a script's folder on sys.path)


def move_label(move: str) -> str:
    """The move without the mover's mark (tic_tac_toe's ``x(1,1)`` / ``o(1,1)``, connect_four's ``x3`` / ``o3``
    are one cell / column); other moves stay as they are."""
    return re.sub(r"^[xo](?=[\d(])", "", move)


def fixed_move_scores(env_section: dict[str, Any], positions: int | None) -> dict[str, Any]:
    """Per openspiel case: the mean engine score of each fixed move, the random mover and the share of positions
    where the move is legal, over the validation plan (at most ``positions`` per case)."""
    from verl_ext.mixture import EnvMixture

    mixture = EnvMixture(env_section)
    adapter = mixture.adapters.get("openspiel")
    if adapter is None or adapter.config.reward_mode != "engine":
        raise SystemExit("fixed_move_baseline needs openspiel with reward_mode=engine in the env section")
    per_case: dict[str, list[dict[str, float]]] = defaultdict(list)
    for ref in mixture.plan("val"):
        if ref.env != "openspiel" or (positions and len(per_case[ref.case]) >= positions):
            continue
        task = adapter.make_task(ref.case, ref.index, ref.seed)
        values = {int(a): v for a, v in json.loads(adapter.move_values(task))["values"].items()}
        best = max(values.values())
        scores = {move: 1.0 - (best - values[action])
                  for move, action in adapter._position(ref.case, task.state).moves.items()}
        per_case[ref.case].append({move_label(m): s for m, s in scores.items()})
    result = {}
    for case, tables in per_case.items():
        random_scores = [statistics.mean(t.values()) for t in tables]
        labels = sorted({label for t in tables for label in t})
        fixed = {}
        for label in labels:
            picked = [t.get(label, r) for t, r in zip(tables, random_scores)]
            fixed[label] = {"score": round(statistics.mean(picked), 4),
                            "legal_share": round(sum(label in t for t in tables) / len(tables), 4)}
        best_label = max(fixed, key=lambda k: fixed[k]["score"])
        result[case] = {"positions": len(tables), "random": round(statistics.mean(random_scores), 4),
                        "best_fixed_move": best_label, "best_fixed_score": fixed[best_label]["score"],
                        "engine_best": 1.0, "fixed_moves": fixed}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML with the env section (as for verl-ext export)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--prompts", type=int, default=500, help="validation positions per game (default 500)")
    parser.add_argument("--out", type=Path, help="write the result as JSON here too")
    args = parser.parse_args(argv)
    return run_cli(args, lambda section: fixed_move_scores(section, args.prompts))


if __name__ == "__main__":
    raise SystemExit(main())
