"""Where GRPO's push goes on single-move games: towards reading the board, or towards one favourite move?

Every single-move GRPO run on SmolLM2 ended at the fixed-move line (connect_four: always column 3, 0.798;
docs/learning.md). This script asks how much of GRPO's own signal points that way before any model is involved.
For training positions of one game it samples GRPO groups from a given move distribution, pays each move what
the engine reward pays (``format_weight + (1 - format_weight) * task_score``, the adapter's own table), and takes
verl 0.9.1's advantages (``compute_grpo_outcome_advantage``, tied groups at 0 as the train scripts run it) with and
without the division by the group's standard deviation (``algorithm.norm_adv_by_std_in_grpo``; False is Dr. GRPO).

In a group, the policy-gradient push on the logit of move ``k`` is the sum of the advantages of the replies that
chose ``k`` (GRPO's advantages sum to 0 in a group, so the softmax's ``-p_k`` term drops out). Summed over
positions, each move's push is what a position-independent preference for that move receives (the shared part a
small model learns first); per position, half the L1 norm of the push vector is the board-reading signal. Both
settings push every position the same way; they differ only in how much each position weighs: dividing by the
group's std gives a position whose moves differ by 0.01 as much push as one whose moves differ by 0.9.

    python bench/learning/advantage_pull.py --case connect_four --positions 400 --policy uniform \\
        --policy favourite:0.56 --out pull_c4.json

Output: a markdown table on stdout, with ``--out`` the numbers as JSON, with ``--plot`` a PNG (``--add`` earlier
JSONs to put other games beside this one). No model, CPU only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl_ext.envs import make_env
from verl_ext.envs.tactics import one_ply
from verl_ext.evaluation.single_move import fixed_move_baselines, training_tasks
from verl_ext.group_stats import EQUAL_REWARDS
from verl_ext.mixture import EnvMixture

# how far apart a position's best and worst legal moves are (task-score units) decides its class
FLAT_BELOW = 0.1
DECISIVE_FROM = 0.5


def parse_policy(spec: str) -> tuple[str, float]:
    """``uniform`` or ``favourite:Q`` (the game's best fixed move with probability Q where legal, the rest
    uniform over the other legal moves); SystemExit naming the spec otherwise."""
    if spec == "uniform":
        return "uniform", 0.0
    name, _, share = spec.partition(":")
    try:
        q = float(share)
    except ValueError:
        q = -1.0
    if name != "favourite" or not 0.0 < q < 1.0:
        raise SystemExit(f"--policy {spec!r}: expected 'uniform' or 'favourite:Q' with 0 < Q < 1")
    return name, q


def parse_reward(spec: str) -> float | None:
    """``engine`` (None: the task score as the engine reward pays it) or ``best:TOL`` (the tolerance: a move
    scores 1 when its task score is within TOL of the position's best, else 0); SystemExit naming the spec."""
    if spec == "engine":
        return None
    name, _, tol = spec.partition(":")
    try:
        tolerance = float(tol)
    except ValueError:
        tolerance = -1.0
    if name != "best" or not 0.0 <= tolerance < 1.0:
        raise SystemExit(f"--reward {spec!r}: expected 'engine' or 'best:TOL' with 0 <= TOL < 1")
    return tolerance


def paid_scores(scores: dict[int, float], tolerance: float | None) -> dict[int, float]:
    """What each move's task score becomes under the reward ``tolerance`` names (see ``parse_reward``)."""
    if tolerance is None:
        return dict(scores)
    best = max(scores.values())
    return {action: float(score >= best - tolerance - 1e-9) for action, score in scores.items()}


def move_distribution(actions: list[int], favourite: int, policy: tuple[str, float]) -> np.ndarray:
    """The probability of each of ``actions`` under ``policy``."""
    name, q = policy
    if name == "uniform" or favourite not in actions or len(actions) == 1:
        return np.full(len(actions), 1.0 / len(actions))
    rest = (1.0 - q) / (len(actions) - 1)
    return np.array([q if a == favourite else rest for a in actions])


def group_pushes(rewards: np.ndarray, choices: np.ndarray, moves: int, norm_by_std: bool) -> tuple[np.ndarray, int]:
    """verl's GRPO advantages of ``rewards`` (groups x n) and, per move, the summed advantage of the replies that
    chose it, averaged over the groups; also how many groups had rewards that differ."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from verl_ext.patches.tied_groups import zero_tied_groups

    groups, n = rewards.shape
    token_rewards = torch.tensor(rewards.reshape(-1, 1), dtype=torch.float32)
    index = np.repeat(np.arange(groups), n)
    # as the train scripts run it (GRPO_TIED_GROUPS=zero): a tied group pushes nothing
    advantages, _ = zero_tied_groups(compute_grpo_outcome_advantage)(
        token_rewards, torch.ones_like(token_rewards), index, norm_adv_by_std_in_grpo=norm_by_std)
    per_reply = advantages[:, 0].numpy().reshape(groups, n)
    push = np.zeros(moves)
    np.add.at(push, choices.reshape(-1), per_reply.reshape(-1))
    with_signal = int(np.sum(rewards.max(axis=1) - rewards.min(axis=1) > EQUAL_REWARDS))  # group_stats.rewards_differ
    return push / groups, with_signal


def tied_group_noise(rewards: list[float], n: int) -> dict[str, Any]:
    """verl's own advantage (unpatched) of each reply in a group of ``n`` replies all paid the same reward, for
    each of ``rewards``: it should be 0 (no signal); float32 rounding makes it nonzero
    (``verl_ext/patches/tied_groups.py``)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    original = getattr(compute_grpo_outcome_advantage, "__wrapped__", compute_grpo_outcome_advantage)
    scores = torch.tensor(rewards, dtype=torch.float32).repeat_interleave(n).unsqueeze(-1)
    index = np.repeat(np.arange(len(rewards)), n)
    advantages, _ = original(scores, torch.ones_like(scores), index)
    per_group = advantages[:, 0].abs().numpy().reshape(len(rewards), n)[:, 0]
    nonzero = per_group[per_group > 0]
    return {"distinct_rewards": len(rewards), "nonzero": int(nonzero.size),
            "median_abs_nonzero": float(np.median(nonzero)) if nonzero.size else 0.0,
            "max_abs": float(per_group.max()) if per_group.size else 0.0}


def tactic_gaps(case: str, states: list[str], tables: list[dict[int, float]]) -> dict[str, Any]:
    """Per kind of one-ply tactic (a win to take, a threat to block), how much more the reward pays the tactical
    moves (``OnePly.tactical_moves``) than the best other move: the task-score gap from the worst tactical move to
    the best other one, and the share of positions where that gap is at most 0 (another move pays as much: a
    later forced win, a loss whatever is played) or at most 0.1. Where the gap is 0, GRPO has no reason to prefer
    the one-ply move, and the held-out "took the win" / "blocked" rates cannot follow the reward there."""
    gaps: dict[str, list[tuple[float, float]]] = {"win": [], "block": []}
    for state, scores in zip(states, tables):
        tactic = one_ply(case, state)
        if tactic is None or not tactic.has_tactic:
            continue
        good = tactic.tactical_moves()
        others = [v for a, v in scores.items() if a not in good]
        if not others:
            continue
        worst_good = min(scores[a] for a in good if a in scores)
        gaps["win" if tactic.win_available else "block"].append((worst_good - max(others), max(others)))
    out = {}
    for kind, rows in gaps.items():
        gap = np.array([g for g, _ in rows])
        out[kind] = {"positions": len(rows)} if not rows else {
            "positions": len(rows), "mean_gap": float(gap.mean()),
            "best_other_pays": float(np.mean([b for _, b in rows])),
            "share_gap_at_most_0": float(np.mean(gap <= 1e-9)), "share_gap_at_most_0.1": float(np.mean(gap <= 0.1))}
    return out


def analyse(case: str, positions: int, policies: list[str], groups: int, n: int, seed: int,
            rewards: tuple[str, ...] = ("engine",), train_positions: str = "all") -> dict[str, Any]:
    """The push of GRPO's advantages per reward, policy and std setting over ``positions`` distinct training
    positions. "Towards the best move" always means the engine's best move(s), whatever the reward pays."""
    settings = {"openspiel": {"game_types": [case], "seed": 0, "reward_mode": "engine",
                              "num_tasks_per_case": 10 * positions},
                "held_out_share": 0.2, "val_tasks_per_case": positions, "train_positions": train_positions}
    tasks = training_tasks(EnvMixture(settings), "openspiel")[:positions]
    engine = make_env("openspiel", {"game_types": [case], "reward_mode": "engine"})
    format_weight = engine.config.format_weight
    started = time.perf_counter()
    tables = [engine.task_scores(case, task.state) for task in tasks]
    scoring_s = time.perf_counter() - started
    # the favourite: the eval's best fixed move on these positions (the tables above are cached in the adapter)
    line = fixed_move_baselines(engine, tasks, {})[case]
    favourite = line["fixed_moves"][line["best_fixed_move"]]["action"]
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"case": case, "positions": len(tasks), "train_positions": train_positions,
                           "groups_per_position": groups, "n": n, "favourite_action": favourite,
                           "favourite_move": line["best_fixed_move"],
                           "favourite_fixed_move_score": line["best_fixed_score"],
                           "random_mover_score": line["random_mover"],
                           "format_weight": format_weight, "scoring_s": round(scoring_s, 1), "results": []}
    spreads = [float(max(s.values()) - min(s.values())) for s in tables]
    out["position_classes"] = {"flat": int(sum(s < FLAT_BELOW for s in spreads)),
                               "middle": int(sum(FLAT_BELOW <= s < DECISIVE_FROM for s in spreads)),
                               "decisive": int(sum(s >= DECISIVE_FROM for s in spreads))}
    out["tactic_gaps"] = tactic_gaps(case, [task.state for task in tasks], tables)
    out["favourite_is_best"] = int(sum(favourite in s and s[favourite] >= max(s.values()) - 1e-9 for s in tables))
    out["tied_group_noise"] = tied_group_noise(
        sorted({format_weight + (1.0 - format_weight) * float(v) for s in tables for v in s.values()}), n)
    for reward, spec in ((reward, spec) for reward in rewards for spec in policies):
        tolerance, policy = parse_reward(reward), parse_policy(spec)
        sampled = []
        for scores in tables:
            actions = sorted(scores)
            probs = move_distribution(actions, favourite, policy)
            choices = rng.choice(len(actions), size=(groups, n), p=probs)
            paid = paid_scores(scores, tolerance)
            values = np.array([paid[a] for a in actions])
            sampled.append((actions, choices, format_weight + (1.0 - format_weight) * values[choices], scores))
        for norm_by_std in (True, False):
            mass = {"flat": 0.0, "middle": 0.0, "decisive": 0.0}
            shared: dict[int, float] = {}
            towards_best = 0.0
            signal_groups = 0
            for (actions, choices, rewards, scores), spread in zip(sampled, spreads):
                push, with_signal = group_pushes(rewards, choices, len(actions), norm_by_std)
                signal_groups += with_signal
                kind = "flat" if spread < FLAT_BELOW else "decisive" if spread >= DECISIVE_FROM else "middle"
                mass[kind] += float(np.abs(push).sum()) / 2
                best = max(scores.values())
                for action, p in zip(actions, push):
                    shared[action] = shared.get(action, 0.0) + float(p)
                    if scores[action] >= best - 1e-9:
                        towards_best += float(p)
            total = sum(mass.values())
            out["results"].append({
                "reward": reward, "policy": spec, "norm_adv_by_std_in_grpo": norm_by_std,
                "groups_with_signal": signal_groups / (groups * len(tables)),
                "board_signal_per_position": total / len(tables),
                "mass_share": {k: (v / total if total else 0.0) for k, v in mass.items()},
                "favourite_pull": shared.get(favourite, 0.0) / total if total else 0.0,
                "best_move_pull": towards_best / total if total else 0.0,
                "shared_pull": {str(a): v / total if total else 0.0 for a, v in sorted(shared.items())},
            })
    return out


def print_table(result: dict[str, Any]) -> None:
    """The result as a markdown table."""
    classes = result["position_classes"]
    kept = "" if result.get("train_positions", "all") == "all" else f" ({result['train_positions']} only)"
    print(f"{result['case']}: {result['positions']} training positions{kept} (flat {classes['flat']}, middle "
          f"{classes['middle']}, decisive {classes['decisive']}); favourite = action {result['favourite_action']} "
          f"({result['favourite_is_best']} positions where it is a best move); {result['groups_per_position']} "
          f"groups of {result['n']} per position")
    noise = result["tied_group_noise"]
    print(f"tied groups (all {result['n']} replies paid the same): verl's advantage is nonzero for {noise['nonzero']} of "
          f"{noise['distinct_rewards']} distinct rewards (median {noise['median_abs_nonzero']:.3f}, largest "
          f"{noise['max_abs']:.3f} per reply); the train scripts zero it (GRPO_TIED_GROUPS=zero)")
    for kind, gap in (result.get("tactic_gaps") or {}).items():
        if gap.get("positions"):
            moves = "winning move" if kind == "win" else "safe move (a block)"
            print(f"{kind} positions: {gap['positions']}; the worst {moves} minus the best other move pays "
                  f"{gap['mean_gap']:+.3f} on average (the best other move {gap['best_other_pays']:.3f}); another move "
                  f"pays as much in {gap['share_gap_at_most_0']:.0%} of them, within 0.1 in "
                  f"{gap['share_gap_at_most_0.1']:.0%}")
    print("| reward | policy | std division | groups with signal | push per position | from flat / middle / decisive "
          "| towards the favourite | towards the best move |")
    print("|---|---|---|---|---|---|---|---|")
    for row in result["results"]:
        share = row["mass_share"]
        print(f"| {row['reward']} | {row['policy']} | {'yes (GRPO)' if row['norm_adv_by_std_in_grpo'] else 'no (Dr. GRPO)'} | "
              f"{row['groups_with_signal']:.2f} | {row['board_signal_per_position']:.3f} | "
              f"{share['flat']:.2f} / {share['middle']:.2f} / {share['decisive']:.2f} | "
              f"{row['favourite_pull']:+.3f} | {row['best_move_pull']:+.3f} |")


def plot(results: list[dict[str, Any]], out_png: Path) -> None:
    """One panel per result (game): for each reward / policy / std setting, the push's shares from flat, middle and
    decisive positions (stacked bars) and its share towards the engine's best move (dots)."""
    from verl_ext.figure import png_figure

    classes = (("flat", "#d9d9d9"), ("middle", "#9ecae1"), ("decisive", "#3182bd"))
    with png_figure(out_png, 1, len(results), (6.5 * len(results), 5.2),
                    title="Where GRPO's push goes (verl's advantages, sampled groups)") as (_, axes):
        for ax, result in zip(axes[0], results):
            rows = result["results"]
            labels = [f"{r['reward']}, {r['policy']}\n{'std' if r['norm_adv_by_std_in_grpo'] else 'no std'}"
                      for r in rows]
            left = np.zeros(len(rows))
            for name, colour in classes:
                share = np.array([r["mass_share"][name] for r in rows])
                ax.barh(labels, share, left=left, color=colour, label=f"from {name} positions")
                left += share
            ax.plot([r["best_move_pull"] for r in rows], labels, "o", color="#e6550d", label="towards the best move")
            ax.plot([r["favourite_pull"] for r in rows], labels, "x", color="black",
                    label=f"towards the favourite ({result['favourite_move']})")
            ax.set_xlim(0, 1.02)
            ax.invert_yaxis()
            kept = "" if result.get("train_positions", "all") == "all" else f", {result['train_positions']} only"
            ax.set_title(f"{result['case']}: {result['positions']} training positions{kept}")
            ax.set_xlabel("share of the push (half the L1 norm, summed over positions)")
            ax.tick_params(axis="y", labelsize=7)
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="connect_four")
    parser.add_argument("--positions", type=int, default=400, help="distinct training positions")
    parser.add_argument("--policy", dest="policies", action="append",
                        help="uniform | favourite:Q (repeatable; default: uniform)")
    parser.add_argument("--reward", dest="rewards", action="append",
                        help="engine | best:TOL (repeatable; default: engine)")
    parser.add_argument("--train-positions", default="all", choices=("all", "tactical"),
                        help="data.env.train_positions: every training position, or those with a win or a block")
    parser.add_argument("--groups", type=int, default=64, help="sampled groups per position")
    parser.add_argument("--n", type=int, default=8, help="replies per group (ROLLOUT_N)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="a PNG of this result; with --add, beside earlier --out JSONs")
    parser.add_argument("--add", type=Path, action="append", default=[], help="an earlier --out JSON for --plot")
    args = parser.parse_args(argv)
    if args.positions < 1 or args.groups < 1 or args.n < 2:
        raise SystemExit("--positions and --groups must be >= 1, --n >= 2")
    for spec in args.rewards or []:
        parse_reward(spec)
    for spec in args.policies or []:
        parse_policy(spec)
    result = analyse(args.case, args.positions, args.policies or ["uniform"], args.groups, args.n, args.seed,
                     tuple(args.rewards or ["engine"]), args.train_positions)
    print_table(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        plot([json.loads(path.read_text()) for path in args.add] + [result], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
