"""Which training opponents can bring a kuhn_poker policy below half the uniform policy's exploitability (issue 47)?

A tabular model of whole-hand GRPO, on the CPU in about a minute (OpenSpiel, exact values, no sampling):

1. every pure policy (one action at each of the 12 information states; the learner plays both seats, as the
   runs' alternating seats do): its exact return against uniform random and against the CFR+ opponent
   (``cfr``, 1000 iterations, the cached policy of verl_ext/envs/cfr_policy.py), its exploitability, and the
   exploitability of the best responses to random, to CFR+ and to mixtures of the two: what GRPO against fixed
   bots converges towards once the policy has collapsed;
2. a softmax policy over the 12 information states, started at the uniform policy (the rules cold start), by
   exact gradient ascent on the mean return (seats averaged) against an opponent mixture (``self`` = the current
   policy, held fixed within a step), minus ``beta`` x KL(policy || uniform) summed over information states (a
   KL anchor to the cold start; beta in chips): exploitability and exact return against random after N steps.

It is a model of the direction of training, not of SmolLM2's GRPO (whose steps, sampling, KL estimator and
advantage normalisation differ); it decides which opponents the run files use.

    .venv/bin/python bench/learning/kuhn_opponent_model.py [--steps 300] [--lr 2.0]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability, expected_game_score

from verl_ext.envs.cfr_policy import solve

GAME = pyspiel.load_game("kuhn_poker")
MIXES = {
    "random": {"random": 1.0},
    "cfr": {"cfr": 1.0},
    "self": {"self": 1.0},
    "cfr:0.5,random:0.5": {"cfr": 0.5, "random": 0.5},
    "cfr:0.5,random:0.25,self:0.25": {"cfr": 0.5, "random": 0.25, "self": 0.25},
    "self:0.5,cfr:0.5": {"self": 0.5, "cfr": 0.5},
    "self:0.5,cfr:0.25,random:0.25": {"self": 0.5, "cfr": 0.25, "random": 0.25},
}


def seat_averaged(policy: os_policy.Policy, opponent: os_policy.Policy) -> float:
    """The policy's exact expected chips a hand against ``opponent``, its seat alternating."""
    first = expected_game_score.policy_value(GAME.new_initial_state(), [policy, opponent])[0]
    second = expected_game_score.policy_value(GAME.new_initial_state(), [opponent, policy])[1]
    return (first + second) / 2


def softmax_policy(theta: np.ndarray) -> os_policy.TabularPolicy:
    policy = os_policy.TabularPolicy(GAME)
    e = np.exp(theta - theta.max(axis=1, keepdims=True))
    policy.action_probability_array[:] = e / e.sum(axis=1, keepdims=True)
    return policy


def pure_policies(uniform: os_policy.Policy, cfr: os_policy.Policy) -> None:
    rows = []
    size = len(os_policy.TabularPolicy(GAME).states)
    for bits in itertools.product([0, 1], repeat=size):
        policy = os_policy.TabularPolicy(GAME)
        policy.action_probability_array[:] = 0
        for i, b in enumerate(bits):
            policy.action_probability_array[i, b] = 1
        rows.append((seat_averaged(policy, uniform), seat_averaged(policy, cfr),
                     exploitability.exploitability(GAME, policy)))
    print(f"{len(rows)} pure policies; the least exploitable: {min(r[2] for r in rows):.3f} chips a hand")
    for w in (0.0, 0.25, 0.5, 0.75, 1.0):
        best = max((1 - w) * r[0] + w * r[1] for r in rows)
        tied = [r for r in rows if abs((1 - w) * r[0] + w * r[1] - best) < 1e-9]
        ex = sorted(r[2] for r in tied)
        print(f"  best responses to {1 - w:.2f} random + {w:.2f} cfr: {len(tied)} tied, exploitability "
              f"{ex[0]:.3f}-{ex[-1]:.3f}, return vs random {tied[0][0]:+.3f}")


def train(weights: dict[str, float], beta: float, steps: int, lr: float, opponents: dict[str, os_policy.Policy],
          eps: float = 1e-5) -> tuple[float, float]:
    theta = np.zeros((len(os_policy.TabularPolicy(GAME).states), 2))

    def objective(t: np.ndarray, fixed: os_policy.Policy) -> float:
        policy = softmax_policy(t)
        value = sum(w * seat_averaged(policy, fixed if name == "self" else opponents[name])
                    for name, w in weights.items() if w)
        p = policy.action_probability_array
        return value - beta * float(np.sum(p * np.log(np.maximum(p, 1e-12) * p.shape[1])))

    for _ in range(steps):
        fixed = softmax_policy(theta.copy())
        base = objective(theta, fixed)
        grad = np.zeros_like(theta)
        for i, j in itertools.product(range(theta.shape[0]), range(theta.shape[1])):
            t = theta.copy()
            t[i, j] += eps
            grad[i, j] = (objective(t, fixed) - base) / eps
        theta += lr * grad
    policy = softmax_policy(theta)
    return exploitability.exploitability(GAME, policy), seat_averaged(policy, opponents["random"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--betas", default="0,0.02,0.1")
    args = parser.parse_args()
    started = time.perf_counter()
    uniform, cfr = os_policy.UniformRandomPolicy(GAME), solve("kuhn_poker")
    print(f"uniform random: exploitability {exploitability.exploitability(GAME, uniform):.3f}; "
          f"cfr: {exploitability.exploitability(GAME, cfr):.2e}")
    pure_policies(uniform, cfr)
    print(f"softmax policy from uniform, {args.steps} exact gradient steps of lr {args.lr}:")
    for beta in (float(b) for b in args.betas.split(",")):
        for name, weights in MIXES.items():
            ex, vs_random = train(weights, beta, args.steps, args.lr, {"random": uniform, "cfr": cfr})
            print(f"  beta {beta:<5g} {name:<30} exploitability {ex:.3f}  return vs random {vs_random:+.3f}",
                  flush=True)
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
