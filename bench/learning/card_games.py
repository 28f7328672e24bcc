"""Whole hands of poker and Hanabi on the CPU: what the reference policy of cold-start rows earns, and how fast.

    .venv/bin/python bench/learning/card_games.py [--hands 1000] [--game-types kuhn_poker,leduc_poker,holdem_small,hanabi_small]

For every case and opponent, plays ``--hands`` whole hands (seats alternating, seeds 0..N-1) through the training
``Match`` with the reference move (``Episode.reference_move``: a CFR+ draw in poker, a random legal move in Hanabi)
as every reply of the trained seat, as ``verl-ext export --format sft`` demonstrations do; prints the mean return in
chips (Hanabi: team score) with its 95 % interval, the mean training reward (the normalised return), and the
milliseconds per hand. The CFR policies come from the cache (``$VERL_EXT_CACHE/cfr``), solved first if missing.
"""

from __future__ import annotations

import argparse
import statistics
import time

from verl_ext.envs import make_env
from verl_ext.envs.episode import parse_opponent
from verl_ext.games.demonstration import play_demonstration
from verl_ext.games.match import MatchRules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hands", type=int, default=1000)
    parser.add_argument("--game-types", default="kuhn_poker,leduc_poker,holdem_small,hanabi_small")
    args = parser.parse_args(argv)
    adapter = make_env("openspiel", {"game_types": args.game_types.split(","), "task_mode": "game"})
    print("| case | opponent | hands | mean return [95 %] | reward | ms / hand |")
    print("|---|---|---|---|---|---|")
    for case in adapter.cases():
        opponents = ["random", "self"] + (["cfr"] if adapter.opponent_problem(case, parse_opponent("cfr", "x")) is None
                                          else [])
        for label in opponents:
            opponent = parse_opponent(label, "--opponent")
            adapter.reference_move(case, adapter.start_episode(case, 0, 0).state, 0)  # solve / load outside the clock
            returns, rewards, started = [], [], time.perf_counter()
            for seed in range(args.hands):
                episode = adapter.start_episode(case, seed, seed % 2)
                _, record = play_demonstration(episode, opponent, MatchRules())
                returns.append(record.returns[record.seat])
                rewards.append(record.normalised_return)
            elapsed = (time.perf_counter() - started) / args.hands * 1000
            mean, half = statistics.fmean(returns), 1.96 * statistics.stdev(returns) / len(returns) ** 0.5
            print(f"| {case} | {label} | {args.hands} | {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] | "
                  f"{statistics.fmean(rewards):.3f} | {elapsed:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
