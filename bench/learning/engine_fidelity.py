"""Is the engine reward right? Score held-out positions with the reward's MCTS settings and with a stronger search,
and report how good the reward's best move is by the stronger one, how far apart the moves of a position are, and
what a random mover and each fixed move score (the fixed-move line) under both.

    python bench/learning/engine_fidelity.py --case connect_four --positions 40 --simulations 300,3000
    python bench/learning/engine_fidelity.py --case tic_tac_toe --positions 500 --exact   # + OpenSpiel's alpha-beta

``--exact`` (small two-player zero-sum games: it searches the whole tree from each position,
``verl_ext/envs/exact_values.py``) also counts the positions where the move each simulation count calls best is
worse than the best move by OpenSpiel's alpha-beta search: a blunder the engine reward pays as the best move.

A GRPO run that ends at the fixed-move line has two suspects: a reward whose values are noise (then the stronger
search disagrees with the reward's best move) or a policy that does not read the board (the values agree, and the
best move is worth well above the fixed move). Output: a table on stdout and, with --out, the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from verl_ext.envs import make_env
from verl_ext.envs.exact_values import exact_move_values, exact_problem
from verl_ext.envs.openspiel_env import load_game
from verl_ext.evaluation.single_move import fixed_move_baselines, heldout_tasks, training_tasks
from verl_ext.mixture import EnvMixture


def analyse(case: str, positions: int, simulations: list[int], held_out_share: float = 0.2,
            val_tasks_per_case: int = 500, exact: bool = False, split: str = "held-out") -> dict:
    """Per simulation count: the mean value (under the strongest count) of the move it calls best, the mean
    best-minus-worst spread, the random mover's and each fixed move's mean score, and the seconds it took."""
    if split == "training-rows":  # the training rows themselves, repeats kept (as an SFT export of that size)
        mixture = EnvMixture({"openspiel": {"game_types": [case], "seed": 0, "num_tasks_per_case": positions},
                              "held_out_share": held_out_share, "val_tasks_per_case": val_tasks_per_case})
        tasks = [mixture.build(ref) for ref in mixture.plan("train") if ref.env == "openspiel"][:positions]
    elif split == "training":  # the first distinct positions of the training rows (as `verl-ext eval --positions`)
        mixture = EnvMixture({"openspiel": {"game_types": [case], "seed": 0, "num_tasks_per_case": 10 * positions},
                              "held_out_share": held_out_share, "val_tasks_per_case": positions})
        tasks = training_tasks(mixture, "openspiel")[:positions]
    else:
        mixture = EnvMixture({"openspiel": {"game_types": [case], "seed": 0}, "held_out_share": held_out_share,
                              "val_tasks_per_case": val_tasks_per_case})
        tasks = heldout_tasks(mixture, "openspiel")[:positions]
    tables: dict[int, list[dict[int, float]]] = {}
    adapters: dict[int, Any] = {}
    seconds: dict[int, float] = {}
    for sims in simulations:
        adapters[sims] = make_env("openspiel", {"game_types": [case], "reward_mode": "engine",
                                                "mcts_simulations": sims})
        start = time.perf_counter()
        tables[sims] = [adapters[sims].task_scores(case, task.state) for task in tasks]
        seconds[sims] = time.perf_counter() - start
    strongest = tables[max(simulations)]
    exact_values = None
    if exact:
        game = load_game(case)
        problem = exact_problem(game)
        if problem:
            raise SystemExit(f"--exact: cannot search {case} to the end: {problem}")
        solved: dict[str, dict[int, float]] = {}  # training rows repeat positions: each is searched once
        for task in tasks:
            if task.state not in solved:
                solved[task.state] = exact_move_values(game, game.deserialize_state(task.state))
        exact_values = [solved[task.state] for task in tasks]
    out = {"case": case, "split": split, "positions": len(tasks), "reference_simulations": max(simulations), "by_simulations": {}}
    for sims, table in tables.items():
        best = [max(scores, key=lambda a, s=scores: (s[a], -a)) for scores in table]  # the reward's tie-break
        line = fixed_move_baselines(adapters[sims], tasks, {})[case]  # the eval's fixed-move line, same positions
        out["by_simulations"][str(sims)] = {
            "best_move_value_by_reference": statistics.fmean(strongest[i][b] for i, b in enumerate(best)),
            "best_minus_worst": statistics.fmean(max(s.values()) - min(s.values()) for s in table),
            "random_mover": line["random_mover"],
            "fixed_moves": {move: entry["score"] for move, entry in line["fixed_moves"].items()},
            "seconds": round(seconds[sims], 2),
        }
        if exact_values is not None:  # the reward's best move below alpha-beta's best: a blunder paid as the best
            out["by_simulations"][str(sims)]["blunders_by_alpha_beta"] = sum(
                values[b] < max(values.values()) for values, b in zip(exact_values, best))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="connect_four")
    parser.add_argument("--positions", type=int, default=40)
    parser.add_argument("--simulations", default="300,3000", help="comma list; the largest is the reference")
    parser.add_argument("--exact", action="store_true", help="also compare with OpenSpiel's alpha-beta search")
    parser.add_argument("--split", choices=("held-out", "training", "training-rows"), default="held-out",
                        help="held-out positions, distinct training positions, or the training rows with repeats")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    simulations = sorted({int(s) for s in args.simulations.split(",")})
    result = analyse(args.case, args.positions, simulations, exact=args.exact, split=args.split)
    print(f"{result['case']}: {result['positions']} {result['split']} positions, reference = "
          f"{result['reference_simulations']} simulations")
    print("| simulations | its best move, by the reference | best - worst | random mover | best fixed move | s |")
    print("|---|---|---|---|---|---|")
    for sims, row in result["by_simulations"].items():
        move, value = max(row["fixed_moves"].items(), key=lambda kv: kv[1])
        print(f"| {sims} | {row['best_move_value_by_reference']:.3f} | {row['best_minus_worst']:.3f} | "
              f"{row['random_mover']:.3f} | {move}: {value:.3f} | {row['seconds']} |"
              + (f" blunders by alpha-beta: {row['blunders_by_alpha_beta']}" if "blunders_by_alpha_beta" in row
                 else ""))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
