"""Why does whole-hand self-play GRPO turn a poker policy pure, and does a stronger anchor keep it mixed?

Issue 47's second card run (docs/runs/2026-11-27-h200x2-cards-second-run/) lowered SmolLM2's kuhn exploitability
from 0.473 to 0.237 / 0.295 (30 / 60 steps), but the curve swung (0.146 at step 30 of the 60-step run): the policy
went pure (entropy 0.111 -> 0.008, the first player's Jack bluffing 0.08 -> 0.99). Leduc's rose (2.464 -> 2.580)
as the policy stopped folding. This script trains a tabular policy the way verl trained the model and looks for a
setting whose *last* policies stay below a target exploitability.

The model of the runs (OpenSpiel supplies every rule, information state, chance draw and return):
- a softmax over the legal actions of every information state, started at the cold start's measured policy
  (``--start``: the exploitability suite's per-state policy of the cold start, e.g. the curve stage's
  ``step_0.<game>.json``), which is also the KL reference. The logits are a per-state term plus one shared term
  per action, as one "Bet" token serves every state in the LLM (without it, one state's update would never move
  another);
- each step 64 deals x 8 hands of self-play. A group is one deal (the same chance draws, the public card
  included) and one seat for the trained player; both seats sample from the current policy. Reward = the trained
  seat's return scaled to [0, 1] by the game's utility range. Advantage = (reward - group mean) / (group std +
  1e-6), 0 for tied groups (verl's GRPO with the tied-groups fix);
- the loss over every trained decision (token-mean, as verl aggregates): -A log pi(a) + beta * k3 KL to the
  reference at the sampled action (verl's ``low_var_kl``; its gradient is pi - ref in expectation) - c * entropy.
  Two mini-batches of 32 deals a step (``ppo_mini_batch_size=32``), one Adam step each (lr ``--lr``, betas 0.9 /
  0.999), gradients clipped to norm 1 as verl clips.

Adam's step size in logit space stands for the LLM's lr 1e-5. At 0.1-0.2, kuhn at beta 0.05 (the runs') does what
the runs did: a fast drop, then swings as the policy goes pure. It is a model of the direction of training, not of
SmolLM2 (which shares far more between states, and sees later decisions inside the conversation).

    .venv/bin/python bench/learning/poker_grpo_model.py --game kuhn_poker \\
        --start docs/runs/2026-11-27-h200x2-cards-second-run/kuhn-grpo60/curve/exploitability/step_0.kuhn_poker.json
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

GAMES = ("kuhn_poker", "leduc_poker")
MAX_CHANCE_NODES = 4  # kuhn deals 2 cards, leduc 3


@dataclass
class Decisions:
    """The trained seat's decisions of a batch of hands: information-state index, action, hand index."""

    states: np.ndarray
    actions: np.ndarray
    hands: np.ndarray


class TabularGame:
    """A two-player zero-sum OpenSpiel game with its tabular information states."""

    def __init__(self, name: str) -> None:
        if name not in GAMES:
            raise ValueError(f"--game: one of {', '.join(GAMES)}, got {name!r}")
        self.name = name
        self.game = pyspiel.load_game(name)
        self.tabular = os_policy.TabularPolicy(self.game)
        self.legal = self.tabular.legal_actions_mask.astype(bool)  # [states, actions]
        self.low, self.high = self.game.min_utility(), self.game.max_utility()

    def policy(self, probs: np.ndarray) -> os_policy.TabularPolicy:
        policy = os_policy.TabularPolicy(self.game)
        policy.action_probability_array[:] = probs
        return policy

    def exploitability(self, probs: np.ndarray) -> float:
        return float(exploitability.exploitability(self.game, self.policy(probs)))

    def play(self, probs: np.ndarray, draws: np.ndarray, rng: np.random.Generator
             ) -> tuple[list[tuple[int, int, int]], list[float]]:
        """One hand with both seats on ``probs``; the k-th chance node takes the outcome at cumulative probability
        ``draws[k]``, so hands with the same ``draws`` share the deal. Returns the decisions (player, state index,
        action) and the players' returns."""
        state, chance, decisions = self.game.new_initial_state(), 0, []
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, weights = zip(*state.chance_outcomes())
                pick = int(np.searchsorted(np.cumsum(weights), draws[chance] * sum(weights), side="right"))
                state.apply_action(outcomes[min(pick, len(outcomes) - 1)])
                chance += 1
                continue
            player = state.current_player()
            index = self.tabular.state_lookup[state.information_state_string(player)]
            action = int(rng.choice(len(probs[index]), p=probs[index]))
            decisions.append((player, index, action))
            state.apply_action(action)
        return decisions, state.returns()

    def reward(self, chips: float) -> float:
        return (chips - self.low) / (self.high - self.low)


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    z = np.where(legal, logits, -np.inf)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def load_start(path: Path | None, game: TabularGame, floor: float = 1e-3) -> np.ndarray:
    """Per-state action probabilities from an exploitability suite file (``policy``: key -> [[action, p], ...]);
    states it lacks, or no file, are uniform over their legal actions. Floored at ``floor`` and renormalised."""
    probs = game.legal / game.legal.sum(axis=1, keepdims=True)
    if path is not None:
        policy = json.loads(path.read_text())["policy"]
        missing = [key for key in game.tabular.state_lookup if key not in policy]
        if len(missing) == len(game.tabular.state_lookup):
            raise ValueError(f"{path}: none of {game.name}'s information states is in its policy")
        for key, index in game.tabular.state_lookup.items():
            if key in policy:
                probs[index] = 0.0
                for action, p in policy[key]:
                    probs[index, int(action)] = float(p)
    probs = np.where(game.legal, np.maximum(probs, floor), 0.0)
    return probs / probs.sum(axis=1, keepdims=True)


def sample_groups(game: TabularGame, probs: np.ndarray, groups: int, group: int, rng: np.random.Generator
                  ) -> tuple[Decisions, np.ndarray]:
    """``groups`` deals x ``group`` hands, the trained seat alternating by deal: its decisions and its rewards."""
    states, actions, hands, rewards = [], [], [], []
    for g in range(groups):
        draws, seat = rng.random(MAX_CHANCE_NODES), g % 2
        for _ in range(group):
            decisions, returns = game.play(probs, draws, rng)
            for player, index, action in decisions:
                if player == seat:
                    states.append(index)
                    actions.append(action)
                    hands.append(len(rewards))
            rewards.append(game.reward(returns[seat]))
    return Decisions(np.array(states, dtype=int), np.array(actions, dtype=int), np.array(hands, dtype=int)), \
        np.array(rewards)


def group_advantages(rewards: np.ndarray, group: int) -> np.ndarray:
    """verl's GRPO advantages per hand (unbiased std), 0 for a group whose rewards are all equal."""
    grouped = rewards.reshape(-1, group)
    std = grouped.std(axis=1, ddof=1)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    return np.where(std[:, None] > 1e-9, centred / (std[:, None] + 1e-6), 0.0).reshape(-1)


class TableOptimiser:
    """verl's actor update on a table of logits (one shared term per action plus one per state): the token-mean
    loss ``-A log pi + beta * k3 KL - entropy * H`` over a batch of sampled decisions, its gradients clipped to norm
    1 as verl clips, then one Adam step (betas 0.9 / 0.999). ``state_scale`` scales the per-state terms' step against
    the shared ones'. Updates ``shared`` and ``per_state`` in place."""

    def __init__(self, shared: np.ndarray, per_state: np.ndarray, state_scale: float = 1.0) -> None:
        self.params, self.scales = (shared, per_state), (1.0, state_scale)
        self.m = [np.zeros_like(shared), np.zeros_like(per_state)]
        self.v = [np.zeros_like(shared), np.zeros_like(per_state)]
        self.t = 0

    def step(self, states: np.ndarray, actions: np.ndarray, adv: np.ndarray, pi: np.ndarray, legal: np.ndarray,
             ref_a: np.ndarray, beta: float, entropy: float, lr: float) -> None:
        """``pi``, ``legal``: the policy and the legal mask at each decision's state; ``ref_a``: the reference's
        probability of each sampled action."""
        onehot = np.eye(pi.shape[1])[actions]
        dlogp = np.where(legal, onehot - pi, 0.0)  # d log pi(a) / d logits
        pi_a = pi[np.arange(len(pi)), actions]
        dkl = (1.0 - ref_a / pi_a)[:, None] * dlogp  # k3 (low_var_kl) at the sampled action
        g = -adv[:, None] * dlogp + beta * dkl
        if entropy:
            logpi = np.log(np.where(legal, pi, 1.0))
            g = g - entropy * (-pi * (logpi - (pi * logpi).sum(axis=1, keepdims=True)))  # d entropy / d logits
        g = g / len(pi)
        grads = [g.sum(axis=0), np.zeros_like(self.params[1])]
        np.add.at(grads[1], states, g)
        norm = np.sqrt(sum(float((x**2).sum()) for x in grads))
        if norm > 1.0:
            grads = [x / norm for x in grads]
        self.t += 1
        for i, (param, grad, scale) in enumerate(zip(self.params, grads, self.scales)):
            self.m[i] = 0.9 * self.m[i] + 0.1 * grad
            self.v[i] = 0.999 * self.v[i] + 0.001 * grad**2
            param -= scale * lr * (self.m[i] / (1 - 0.9**self.t)) / (np.sqrt(self.v[i] / (1 - 0.999**self.t)) + 1e-8)


def train(game: TabularGame, start: np.ndarray, beta: float, entropy: float, lr: float, steps: int, seed: int,
          record_every: int, state_scale: float = 1.0, deals_per_step: int = 64, group: int = 8,
          minibatches: int = 2) -> list[dict]:
    """One run of the model; a record (step, exploitability, mean per-state entropy, mean probability of each
    action where legal) every ``record_every`` steps. ``state_scale`` scales the per-state terms' step size against
    the shared ones' (below 1: updates move every state together, as an LLM's shared weights do)."""
    rng = np.random.default_rng(seed)
    legal, ref = game.legal, start
    per_state = np.where(legal, np.log(np.where(legal, start, 1.0)), 0.0)
    shared = np.zeros(legal.shape[1])
    optimiser, records = TableOptimiser(shared, per_state, state_scale), []
    for step in range(steps + 1):
        probs = masked_softmax(shared + per_state, legal)
        if step % record_every == 0:
            logp = np.log(np.where(legal, probs, 1.0))
            records.append({"step": step, "exploitability": game.exploitability(probs),
                            "entropy": float(-(probs * logp).sum(axis=1).mean()),
                            "action_means": [float(probs[legal[:, a], a].mean()) for a in range(legal.shape[1])]})
        if step == steps:
            break
        for groups in np.array_split(np.arange(deals_per_step), minibatches):
            probs = masked_softmax(shared + per_state, legal)
            decisions, rewards = sample_groups(game, probs, len(groups), group, rng)
            if len(decisions.states) == 0:
                continue
            adv = group_advantages(rewards, group)[decisions.hands]
            optimiser.step(decisions.states, decisions.actions, adv, probs[decisions.states], legal[decisions.states],
                           ref[decisions.states, decisions.actions], beta, entropy, lr)
    return records


def plot(results: list[dict], path: Path, title: str, lines: dict[str, float]) -> None:
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
    for (label, value), style in zip(lines.items(), ("--", ":")):
        ax.axhline(value, color="grey", ls=style, lw=1, label=f"{label} ({value:.3g})")
    ax.set(xlabel="GRPO step", ylabel="exploitability (chips a hand)", title=title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="kuhn_poker", help=f"one of {', '.join(GAMES)}")
    parser.add_argument("--start", type=Path, help="the cold start's per-state policy (default: uniform)")
    parser.add_argument("--target", type=float, help="the exploitability to stay below (default: the start's, and "
                                                     "for kuhn half the uniform policy's, 0.229)")
    parser.add_argument("--betas", default="0,0.05,0.2,0.5,1")
    parser.add_argument("--entropies", default="0")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--state-scale", type=float, default=1.0,
                        help="the per-state terms' step size over the shared ones' (below 1: states move together)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write every record as JSON here")
    parser.add_argument("--plot", type=Path, help="draw the exploitability curves (mean, min-max band) to this PNG")
    args = parser.parse_args()
    started = time.perf_counter()
    game = TabularGame(args.game)
    start = load_start(args.start, game)
    start_value = game.exploitability(start)
    uniform = game.exploitability(game.legal / game.legal.sum(axis=1, keepdims=True))
    target = args.target if args.target is not None else (uniform / 2 if args.game == "kuhn_poker" else start_value)
    print(f"{args.game}: start exploitability {start_value:.3f}, uniform {uniform:.3f}, target < {target:.3f}; "
          f"lr {args.lr}, {args.steps} steps, {args.seeds} seeds; mean [min, max] over seeds at each step")
    results = []
    for entropy in (float(x) for x in args.entropies.split(",")):
        for beta in (float(x) for x in args.betas.split(",")):
            runs = [train(game, start, beta, entropy, args.lr, args.steps, seed, args.every, args.state_scale)
                    for seed in range(args.seeds)]
            results.append({"beta": beta, "entropy": entropy, "runs": runs})
            cells = []
            for i, record in enumerate(runs[0]):
                ex = np.array([run[i]["exploitability"] for run in runs])
                cells.append(f"{record['step']}: {ex.mean():.3f} [{ex.min():.3f}, {ex.max():.3f}]")
            below = np.mean([[r["exploitability"] < target for r in run if r["step"] >= args.steps // 2]
                             for run in runs])
            ent = np.mean([run[-1]["entropy"] for run in runs])
            means = np.mean([run[-1]["action_means"] for run in runs], axis=0)
            print(f"beta {beta:<5g} entropy {entropy:<5g} | " + " | ".join(cells)
                  + f" | second half's checkpoints < {target:.3f}: {below:.2f} | last entropy {ent:.3f}"
                  + " | last mean P(action) " + " ".join(f"{x:.2f}" for x in means), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "start": start_value,
                                        "uniform": uniform, "target": target, "results": results}))
    if args.plot:
        plot(results, args.plot, f"tabular self-play GRPO on {args.game} (Adam lr {args.lr}, state scale "
             f"{args.state_scale:g}, {args.seeds} seeds)",
             {"uniform random": uniform, "target": target})
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
