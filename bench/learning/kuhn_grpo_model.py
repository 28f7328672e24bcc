"""Why does whole-hand self-play GRPO turn a kuhn_poker policy pure, and does a stronger anchor keep it mixed?

Issue 47's second card run (docs/runs/2026-11-27-h200x2-cards-second-run/) lowered SmolLM2's kuhn exploitability
from 0.473 to 0.237 / 0.295 (30 / 60 steps), but the curve swung (0.146 at step 30 of the 60-step run). The
policy went pure: entropy 0.111 -> 0.008, the first player's Jack bluffing 0.08 -> 0.99. This script trains a
tabular policy the way verl trained the model and looks for a setting whose *last* policy stays below 0.229.

The model of the run (OpenSpiel supplies every rule, information state and return; no sampling shortcut):
- a softmax over the 12 information states' two actions, started at the cold start's measured per-state policy
  (``--start``: the curve stage's ``step_0.kuhn_poker.json``), which is also the KL reference. The logit of
  action 1 (Bet / Call) is a per-state term plus one shared term, as one "Bet" token is shared by every state in
  the LLM (without it, one state's update would never move another);
- each step 64 deals x 8 hands of self-play: a group is one deal and one seat for the trained player; both seats
  sample from the current policy; reward = the trained seat's return scaled to [0, 1] ((chips + 2) / 4);
  advantage = (reward - group mean) / (group std + 1e-6), 0 for tied groups (verl's GRPO, our tied-groups fix);
- the loss over every trained decision (token-mean, as verl aggregates): -A log pi(a) + beta * k3 KL to the
  reference at the sampled action (verl's ``low_var_kl``; its gradient is pi - ref in expectation) - c * entropy;
  two mini-batches of 32 deals a step (``ppo_mini_batch_size=32``), one Adam step each (lr ``--lr``, betas
  0.9 / 0.999), gradients clipped to norm 1 as verl clips.

Adam's step size in logit space stands for the LLM's lr 1e-5. The default 0.05 was picked so that beta 0.05 (the
runs') reproduces what the runs showed: a mostly pure policy within 60 steps, exploitability swinging between ~0.15
and ~0.35. It is a model of the direction of training, not of SmolLM2.

    .venv/bin/python bench/learning/kuhn_grpo_model.py --start docs/runs/2026-11-27-h200x2-cards-second-run/kuhn-grpo60/curve/exploitability/step_0.kuhn_poker.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

GAME = pyspiel.load_game("kuhn_poker")
HISTORIES = ("", "p", "b", "pb")  # decision points; the player to act is 0, 1, 1, 0
TERMINALS = ("pp", "pbp", "pbb", "bp", "bb")


@dataclass(frozen=True)
class KuhnTable:
    """Kuhn's tree as arrays, read from OpenSpiel once: per deal (6), the information-state index of the player to
    act at each decision point, and player 0's return at each terminal history."""

    state_index: np.ndarray  # [deal, history] -> index into TabularPolicy.states
    returns: np.ndarray  # [deal, terminal] -> player 0's chips
    keys: tuple[str, ...]  # the TabularPolicy's information-state keys, by index


def build_table() -> KuhnTable:
    tabular = os_policy.TabularPolicy(GAME)
    deals, state_index, returns = [], [], []
    root = GAME.new_initial_state()
    for first, _ in root.chance_outcomes():
        after_first = root.child(first)
        for second, _ in after_first.chance_outcomes():
            dealt = after_first.child(second)
            indices, rets = [], []
            for history in HISTORIES:
                state = _play(dealt, history)
                indices.append(tabular.state_lookup[state.information_state_string(state.current_player())])
            for history in TERMINALS:
                state = _play(dealt, history)
                assert state.is_terminal()
                rets.append(state.returns()[0])
            deals.append((first, second))
            state_index.append(indices)
            returns.append(rets)
    return KuhnTable(np.array(state_index), np.array(returns, dtype=float), tuple(tabular.state_lookup))


def _play(state: pyspiel.State, history: str) -> pyspiel.State:
    for move in history:
        state = state.child({"p": 0, "b": 1}[move])
    return state


def probabilities(shared: float, per_state: np.ndarray) -> np.ndarray:
    """P(action 1) at every information state."""
    return 1.0 / (1.0 + np.exp(-(shared + per_state)))


def policy_of(table: KuhnTable, p_bet: np.ndarray) -> os_policy.TabularPolicy:
    policy = os_policy.TabularPolicy(GAME)
    policy.action_probability_array[:, 1] = p_bet
    policy.action_probability_array[:, 0] = 1.0 - p_bet
    return policy


def play_hands(table: KuhnTable, p_bet: np.ndarray, deals: np.ndarray, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """Sample one hand per entry of ``deals`` with both seats on ``p_bet``: the actions taken at each decision
    point (-1: not reached) and player 0's chips."""
    n = len(deals)
    actions = np.full((n, len(HISTORIES)), -1)
    draw = rng.random((n, len(HISTORIES)))
    idx = table.state_index[deals]
    first = (draw[:, 0] < p_bet[idx[:, 0]]).astype(int)  # player 0: pass (0) or bet (1)
    actions[:, 0] = first
    bet = first == 1
    reply_b = (draw[:, 2] < p_bet[idx[:, 2]]).astype(int)  # player 1 facing a bet: fold or call
    reply_p = (draw[:, 1] < p_bet[idx[:, 1]]).astype(int)  # player 1 after a pass: pass or bet
    actions[bet, 2] = reply_b[bet]
    actions[~bet, 1] = reply_p[~bet]
    pb = (~bet) & (reply_p == 1)
    last = (draw[:, 3] < p_bet[idx[:, 3]]).astype(int)  # player 0 facing a bet after passing
    actions[pb, 3] = last[pb]
    terminal = np.where(bet, np.where(reply_b == 1, 4, 3), np.where(reply_p == 0, 0, np.where(last == 1, 2, 1)))
    return actions, table.returns[deals, terminal]


def train(table: KuhnTable, start: np.ndarray, beta: float, entropy: float, lr: float, steps: int, seed: int,
          record_every: int, deals_per_step: int = 64, group: int = 8, minibatches: int = 2) -> list[dict]:
    """One run of the model; a record (step, exploitability, mean entropy, p_bet) every ``record_every`` steps."""
    rng = np.random.default_rng(seed)
    ref = start.copy()
    shared, per_state = 0.0, np.log(start / (1 - start))
    params = np.concatenate([[shared], per_state])
    m, v = np.zeros_like(params), np.zeros_like(params)
    adam_t, records = 0, []
    for step in range(steps + 1):
        p = probabilities(params[0], params[1:])
        if step % record_every == 0:
            ent = -(p * np.log(p) + (1 - p) * np.log(1 - p))
            records.append({"step": step, "exploitability": exploitability.exploitability(GAME, policy_of(table, p)),
                            "entropy": float(ent.mean()), "p_bet": p.round(3).tolist()})
        if step == steps:
            break
        deals = rng.integers(0, len(table.state_index), deals_per_step)
        seats = np.arange(deals_per_step) % 2
        for chunk in np.array_split(np.arange(deals_per_step), minibatches):
            p = probabilities(params[0], params[1:])
            hand_deals = np.repeat(deals[chunk], group)
            hand_seats = np.repeat(seats[chunk], group)
            actions, chips = play_hands(table, p, hand_deals, rng)
            reward = ((np.where(hand_seats == 0, chips, -chips)) + 2.0) / 4.0
            grouped = reward.reshape(len(chunk), group)
            std = grouped.std(axis=1, ddof=1)
            adv = np.where(std[:, None] > 1e-9, (grouped - grouped.mean(axis=1, keepdims=True)) / (std[:, None] + 1e-6),
                           0.0).reshape(-1)
            grad = np.zeros_like(params)  # gradient of the loss (descended)
            count = 0
            idx = table.state_index[hand_deals]
            for point, player in enumerate((0, 1, 1, 0)):
                mine = (actions[:, point] >= 0) & (hand_seats == player)
                if not mine.any():
                    continue
                s, a = idx[mine, point], actions[mine, point]
                q = p[s]
                dlogp = a - q  # d log pi(a) / d logit(action 1)
                pi_a = np.where(a == 1, q, 1 - q)
                ref_a = np.where(a == 1, ref[s], 1 - ref[s])
                dkl = (1.0 - ref_a / pi_a) * dlogp  # k3's gradient at the sampled action
                dent = -q * (1 - q) * np.log(q / (1 - q))  # d entropy / d logit
                g = -adv[mine] * dlogp + beta * dkl - entropy * dent
                np.add.at(grad, 1 + s, g)
                grad[0] += g.sum()
                count += int(mine.sum())
            if count == 0:
                continue
            grad /= count
            norm = np.linalg.norm(grad)
            if norm > 1.0:
                grad /= norm
            adam_t += 1
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad**2
            params -= lr * (m / (1 - 0.9**adam_t)) / (np.sqrt(v / (1 - 0.999**adam_t)) + 1e-8)
    return records


def plot(results: list[dict], path: Path, title: str) -> None:
    """One line per setting: the mean exploitability over seeds, the band from the lowest to the highest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for result in results:
        steps = [r["step"] for r in result["runs"][0]]
        values = np.array([[r["exploitability"] for r in run] for run in result["runs"]])
        label = f"KL {result['beta']:g}" + (f", entropy {result['entropy']:g}" if result["entropy"] else "")
        line, = ax.plot(steps, values.mean(axis=0), marker="o", ms=3, label=label)
        ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.15)
    ax.axhline(0.458, color="red", ls="--", lw=1, label="uniform random (0.458)")
    ax.axhline(0.229, color="grey", ls=":", lw=1, label="half of it (0.229)")
    ax.set(xlabel="GRPO step", ylabel="exploitability (chips a hand)", title=title, ylim=(0, 0.5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_start(path: Path, table: KuhnTable) -> np.ndarray:
    """P(action 1) per information state from an exploitability suite file (``policy``: key -> [[action, p]])."""
    policy = json.loads(path.read_text())["policy"]
    return np.array([dict(policy[key])[1] if isinstance(policy[key][0], list) else policy[key][1][1]
                     for key in table.keys], dtype=float).clip(1e-3, 1 - 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=Path, help="the cold start's step_0.kuhn_poker.json (default: uniform)")
    parser.add_argument("--betas", default="0,0.05,0.2,0.5,1")
    parser.add_argument("--entropies", default="0")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write every record as JSON here")
    parser.add_argument("--plot", type=Path, help="draw the exploitability curves (mean, min-max band) to this PNG")
    args = parser.parse_args()
    started = time.perf_counter()
    table = build_table()
    start = load_start(args.start, table) if args.start else np.full(len(table.keys), 0.5)
    print(f"start: exploitability {exploitability.exploitability(GAME, policy_of(table, start)):.3f}; lr {args.lr}, "
          f"{args.steps} steps, {args.seeds} seeds; exploitability mean [min, max] over seeds at each step")
    results = []
    for entropy in (float(x) for x in args.entropies.split(",")):
        for beta in (float(x) for x in args.betas.split(",")):
            runs = [train(table, start, beta, entropy, args.lr, args.steps, seed, args.every)
                    for seed in range(args.seeds)]
            results.append({"beta": beta, "entropy": entropy, "runs": runs})
            cells = []
            for i, record in enumerate(runs[0]):
                ex = np.array([run[i]["exploitability"] for run in runs])
                cells.append(f"{record['step']}: {ex.mean():.3f} [{ex.min():.3f}, {ex.max():.3f}]")
            below = np.mean([[r["exploitability"] < 0.229 for r in run if r["step"] >= args.steps // 2]
                             for run in runs])
            ent = np.mean([run[-1]["entropy"] for run in runs])
            print(f"beta {beta:<5g} entropy {entropy:<5g} | " + " | ".join(cells)
                  + f" | second half's checkpoints < 0.229: {below:.2f} | last entropy {ent:.3f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))
    if args.plot:
        plot(results, args.plot, f"tabular self-play GRPO on kuhn_poker (Adam lr {args.lr}, {args.seeds} seeds)")
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
