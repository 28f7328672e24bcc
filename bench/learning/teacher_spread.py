"""How much does a cold start's teacher vary its moves, what does varying cost it, and what would GRPO see?

A cold start fitted to the engine's single best move plays one game per deal: the fitted tic_tac_toe cold start won
85.5 % against random, then played eight identical games in 93.8 % of its GRPO groups and learnt nothing
(docs/runs/2026-12-07-h100-ttt-fit-grpo/). ``openspiel.reference_margin`` makes the teacher draw its move among the
moves the engine values within that margin of its best (``OpenSpielAdapter.good_moves``). This script plays the
teacher's own whole games (``games/demonstration.play_demonstration``, the export's game loop), no model, and reports
per game and margin:

- strength: wins, and wins + draws, against each ``--opponents`` entry over ``--games`` games, seats alternating,
  the teacher's draws seeded per game (95 % Wilson intervals); for tic_tac_toe also the share of its moves that keep
  the exact value (alpha-beta, ``envs/exact_values.py``);
- spread: the mean number of good moves at its turns, the share of turns with more than one, and the entropy (bits)
  of its first move on the empty board;
- what GRPO would see from a cold start that had learnt the teacher exactly: the first ``--groups`` train rows of
  the GRPO run (``verl-ext export --format rl`` of ``--row-set`` overrides, by default the tactics run's: whole
  games against ``random:0.5,mcts:50:0.5``, tactics share 0.3), ``--n`` games each started from the row as the
  agent loop starts it (``games/setup.game_setup``: the row's seat and opponent, bots seeded by the row) with the
  teacher's draws seeded per game, each scored by the training reward (``verl_ext.reward.compute_score`` on the game
  record); the share of groups with signal (rewards not all equal, ``signal_report.has_signal``), of groups whose
  games are not all the same game, and of groups whose outcomes differ.

    python bench/learning/teacher_spread.py [--cases tic_tac_toe,connect_four] [--margins 0,0.05,0.1,0.2] \\
        [--opponents random,mcts:50] [--games 200] [--groups 64 --n 8] [--row-set KEY=VALUE ...] \\
        [--out docs/runs/X/teacher_spread.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.game_settings import GameSettings
from verl_ext.envs.openspiel_env import OpenSpielAdapter, OpenSpielConfig
from verl_ext.envs.openspiel_episode import OpenSpielEpisode
from verl_ext.envs.openspiel_rules import legal_move_actions
from verl_ext.evaluation.signal_report import has_signal
from verl_ext.evaluation.stats import wilson_interval
from verl_ext.export import build_rows, load_env_section
from verl_ext.games import RECORD_FIELD
from verl_ext.games.demonstration import MoveChooser, play_demonstration, play_to_the_end
from verl_ext.games.match import MatchRules, TurnRequest
from verl_ext.games.setup import game_setup
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score
from verl_ext.seeding import stable_seed

# groups whose games the report keeps (every move of the trained seat and the reward)
EXAMPLE_GROUPS = 3
# the GRPO rows of smollm2-ttt-tactics-grpo100.env (its train split, seed and the reward's game settings)
TACTICS_RUN_ROWS = ["held_out_share=0.2", "val_tasks_per_case=256", "openspiel.num_tasks_per_case=5000",
                    "openspiel.game.opponent=random:0.5,mcts:50:0.5",
                    "openspiel.game.tactics_weight=0.3", "openspiel.game.max_tokens_per_turn=256"]


class Teacher:
    """The export's reference move at every turn, drawn from a RNG of its own (a game's draws, not the row's),
    counting its good moves and whether each move keeps tic_tac_toe's exact value."""

    def __init__(self, adapter: OpenSpielAdapter, seed: int) -> None:
        self.adapter = adapter
        self.rng = random.Random(seed)
        self.good_counts: list[int] = []
        self.keeps_value: list[bool] = []
        self.first_moves: list[str] = []
        self.moves: list[str] = []

    def choose(self, episode: OpenSpielEpisode, turn: TurnRequest) -> str | None:
        state, case = episode.state, episode.case
        margin = self.adapter.reference_margin_of(case)
        self.good_counts.append(len(self.adapter.good_moves(case, state.serialize(), margin)) if margin > 0 else 1)
        move = self.adapter.reference_move(case, state, self.rng.getrandbits(31))
        if episode.moves_played() == 0:
            self.first_moves.append(move)
        best = best_actions(case, state)
        if best is not None:
            self.keeps_value.append(legal_move_actions(state)[move] in best)
        self.moves.append(move)
        return move


def adapter_for(case: str, margin: float, opponent: str, base: dict[str, Any]) -> OpenSpielAdapter:
    """The run's engine (``base``: OpenSpielConfig fields) with ``margin`` and whole games against ``opponent``."""
    config = OpenSpielConfig(**{**base, "game_types": [case], "task_mode": "game", "reference_margin": margin,
                                "game": {"opponent": opponent}})
    config.validate("openspiel")
    return OpenSpielAdapter(config)


def teacher_game_return(adapter: OpenSpielAdapter, case: str, seed: int, seat: int, chooser: MoveChooser) -> float:
    """One teacher game of the deal (``seed``, ``seat``) against ``adapter``'s opponent: the seat's normalised
    return."""
    settings: GameSettings = adapter.game_settings
    episode = adapter.start_episode(case, seed, seat)
    _, record = play_demonstration(episode, settings.opponent_for(seed, case), MatchRules.from_settings(settings),
                                   chooser)
    if record.normalised_return is None:
        raise RuntimeError(f"{case} seed {seed}: the teacher's game did not end ({record.truncated})")
    return record.normalised_return


def strength(case: str, margin: float, opponent: str, games: int, base: dict[str, Any]) -> dict[str, Any]:
    """The teacher's results against ``opponent`` over ``games`` games, seats alternating, with its spread."""
    adapter = adapter_for(case, margin, opponent, base)
    results: Counter[str] = Counter()
    good: list[int] = []
    keeps: list[bool] = []
    for game in range(games):
        teacher = Teacher(adapter, stable_seed("teacher", case, margin, opponent, game))
        value = teacher_game_return(adapter, case, 10_000 + game, game % 2, teacher.choose)
        results["win" if value == 1.0 else "draw" if value == 0.5 else "loss"] += 1
        good += teacher.good_counts
        keeps += teacher.keeps_value
    out = {"games": games, **dict(results),
           "win_rate": results["win"] / games, "win_ci": wilson_interval(results["win"], games),
           "win_or_draw_rate": (results["win"] + results["draw"]) / games,
           "win_or_draw_ci": wilson_interval(results["win"] + results["draw"], games),
           "mean_good_moves": sum(good) / len(good), "turns_with_choice": sum(g > 1 for g in good) / len(good)}
    if keeps:
        out["keeps_exact_value"] = sum(keeps) / len(keeps)
    return out


def training_rows(case: str, count: int, row_sets: list[str]) -> list[dict[str, Any]]:
    """``count`` GRPO train rows of ``case`` (the export's seeded sample) under the env overrides ``row_sets``."""
    overrides = [f"openspiel.game_types=[{case}]", "openspiel.task_mode=game", *row_sets]
    rows, _ = build_rows(EnvMixture(load_env_section(None, overrides), where="env"), "train", "rl", count,
                         progress=False)
    return rows


def groups(case: str, margin: float, rows: list[dict[str, Any]], n: int, base: dict[str, Any]) -> dict[str, Any]:
    """``n`` teacher games per row, each started as the agent loop starts it and scored by the training reward."""
    teacher_adapter = adapter_for(case, margin, "random", base)
    with_signal = distinct_games = distinct_outcomes = 0
    first: Counter[str] = Counter()
    scores: list[float] = []
    examples: list[dict[str, Any]] = []
    for group, row in enumerate(rows):
        setup = game_setup(row["extra_info"])
        rewards, values, games, order = [], set(), set(), []
        for sample in range(n):
            teacher = Teacher(teacher_adapter, stable_seed("sample", case, margin, group, sample))
            match = setup.new_match()
            play_to_the_end(match, teacher.choose)
            record, moves = match.record, teacher.moves
            text = "\n".join(f"<answer>{m}</answer>" for m in moves)
            info = {**row["extra_info"], RECORD_FIELD: record.to_dict()}
            result = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], info)
            rewards.append(float(result["score"]))
            values.add(record.normalised_return)
            games.add(tuple(moves))
            order.append(tuple(moves))
            first.update(teacher.first_moves)
        scores += rewards
        if group < EXAMPLE_GROUPS:
            examples.append({"seed": setup.seed, "seat": setup.seat, "opponent": record.opponent,
                             "games": [{"moves": list(g), "reward": r} for g, r in zip(order, rewards, strict=True)]})
        with_signal += has_signal(rewards)
        distinct_games += len(games) > 1
        distinct_outcomes += len(values) > 1
    count = len(rows)
    total = sum(first.values())
    entropy = max(0.0, -sum(c / total * math.log2(c / total) for c in first.values())) if total else None
    return {"groups": count, "n": n, "mean_reward": sum(scores) / len(scores),
            "groups_with_signal": with_signal / count, "groups_with_signal_ci": wilson_interval(with_signal, count),
            "groups_not_all_same_game": distinct_games / count,
            "groups_outcomes_differ": distinct_outcomes / count,
            "first_move_entropy_bits": entropy, "first_moves": dict(first.most_common()), "examples": examples}


def plot(report: dict[str, Any], out: Path) -> None:
    """Per game: the teacher's strength by margin (wins against the first opponent, wins + draws against the
    others, 95 % intervals) and the share of GRPO groups with signal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in report["results"]))
    fig, axes = plt.subplots(len(cases), 2, figsize=(10, 3.6 * len(cases)), squeeze=False)
    for row_axes, case in zip(axes, cases):
        results = [r for r in report["results"] if r["case"] == case]
        margins = [r["margin"] for r in results]
        for k, opponent in enumerate(results[0]["strength"]):
            key = "win" if k == 0 else "win_or_draw"
            rates = [r["strength"][opponent][f"{key}_rate"] for r in results]
            lows = [rate - r["strength"][opponent][f"{key}_ci"][0] for rate, r in zip(rates, results)]
            highs = [r["strength"][opponent][f"{key}_ci"][1] - rate for rate, r in zip(rates, results)]
            label = f"{'wins' if k == 0 else 'wins + draws'} vs {opponent}"
            row_axes[0].errorbar(margins, rates, yerr=[lows, highs], marker="o", capsize=3, label=label)
        row_axes[0].set(title=f"{case}: the teacher's games", xlabel="reference_margin", ylabel="share of games",
                        ylim=(0, 1.02))
        row_axes[0].legend(fontsize=8)
        for key, label in (("groups_with_signal", "groups with signal (training reward)"),
                           ("groups_not_all_same_game", "groups not all one game")):
            row_axes[1].plot(margins, [r["grpo_groups"][key] for r in results], marker="o", label=label)
        row_axes[1].set(title=f"{case}: GRPO groups of a player that learnt it", xlabel="reference_margin",
                        ylabel="share of groups", ylim=(0, 1.02))
        row_axes[1].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="tic_tac_toe,connect_four")
    parser.add_argument("--margins", default="0,0.05,0.1,0.2")
    parser.add_argument("--opponents", default="random,mcts:50")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--row-set", dest="row_sets", action="append", default=None, metavar="KEY=VALUE",
                        help="env override of the GRPO run's rows (repeatable; default: the tactics run's: "
                             f"{' '.join(TACTICS_RUN_ROWS)})")
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--n", type=int, default=8, help="games per GRPO group (rollout.n)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="OpenSpielConfig field of the run (JSON value), e.g. --set mcts_simulations=300")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="PNG of the strength and signal by margin")
    parser.add_argument("--replot", type=Path, metavar="JSON", help="only redraw --plot from an earlier --out")
    args = parser.parse_args(argv)
    row_sets = TACTICS_RUN_ROWS if args.row_sets is None else args.row_sets
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot")
        plot(json.loads(args.replot.read_text()), args.plot)
        return 0
    base: dict[str, Any] = {"reward_mode": "engine"}
    for item in args.sets:
        key, _, value = item.partition("=")
        base[key] = json.loads(value)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report: dict[str, Any] = {"settings": {**settings, "row_sets": row_sets, "engine": base}, "results": []}
    for case in args.cases.split(","):
        rows = training_rows(case, args.groups, row_sets)
        for margin in (float(m) for m in args.margins.split(",")):
            start = time.time()
            row: dict[str, Any] = {"case": case, "margin": margin,
                                   "strength": {opp: strength(case, margin, opp, args.games, base)
                                                for opp in args.opponents.split(",")},
                                   "grpo_groups": groups(case, margin, rows, args.n, base)}
            row["seconds"] = round(time.time() - start, 1)
            report["results"].append(row)
            cells = "  ".join(f"{opp}: win {s['win_rate']:.3f} [{s['win_ci'][0]:.3f}, {s['win_ci'][1]:.3f}] "
                              f"w+d {s['win_or_draw_rate']:.3f}" for opp, s in row["strength"].items())
            g = row["grpo_groups"]
            good = row["strength"][args.opponents.split(",")[0]]["mean_good_moves"]
            bits = g["first_move_entropy_bits"]
            entropy = "n/a (no row opens the game)" if bits is None else f"{bits:.2f} bits"
            print(f"{case} margin {margin}: {cells}  good moves {good:.2f}  groups with signal "
                  f"{g['groups_with_signal']:.3f}, not one game {g['groups_not_all_same_game']:.3f}, outcomes differ "
                  f"{g['groups_outcomes_differ']:.3f}, first-move entropy {entropy} "
                  f"({row['seconds']} s)", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
