"""Env adapter benchmark on one core: tasks built per second, scores per second per reward mode, the cost
of a GRPO group of 16 vs one sample, and p99 latency — side by side with a naive adapter that loads the
game and rebuilds the position on every call (no caching, lenient last-tag parsing).

    python bench/micro/bench_envs.py --out docs/bench_envs.json [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import time

import pyspiel

from verl_ext.envs import make_env
from verl_ext.envs.openspiel_env import DEFAULT_CASES
from verl_ext.envs.openspiel_env import OpenSpielAdapter

MODES = ("legal", "outcome", "engine")
_LAST_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class NaiveScorer:
    """What a first attempt looks like: load the game and rebuild the state on each call, nothing cached."""

    def __init__(self, mode: str, settings: dict) -> None:
        self.mode = mode
        # reuse the real adapter's playout/MCTS code paths, but with fresh caches on every call
        self.settings = settings

    def score(self, case: str, state_str: str, response: str) -> float:
        game = pyspiel.load_game(case)
        state = game.deserialize_state(state_str)
        player = state.current_player()
        matches = _LAST_TAG.findall(response)
        if not matches:
            return 0.0
        moves = {state.action_to_string(player, a): a for a in state.legal_actions(player)}
        action = moves.get(matches[-1].strip())
        if action is None:
            return 0.1
        if self.mode == "legal":
            return 1.0
        fresh = make_env("openspiel", {**self.settings, "cases": [case]})
        return fresh.score(case, state_str, response).score


def _timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def bench_case(case: str, tasks: int, settings: dict) -> dict:
    adapter = make_env("openspiel", {**settings, "cases": [case]})
    start = time.perf_counter()
    built = [adapter.make_task(case, i, 10_000 + i) for i in range(tasks)]
    build_rate = tasks / (time.perf_counter() - start)
    rng = random.Random(0)
    result: dict = {"case": case, "tasks_per_s": build_rate}
    for mode in MODES:
        if mode == "engine" and pyspiel.load_game(case).get_type().reward_model != pyspiel.GameType.RewardModel.TERMINAL:
            result[mode] = None
            continue
        mode_settings = {**settings, "reward_mode": mode}
        ours: OpenSpielAdapter = make_env("openspiel", {**mode_settings, "cases": [case]})  # type: ignore[assignment]
        naive = NaiveScorer(mode, mode_settings)
        group = [[f"Thinking.\n<answer>{rng.choice(t.legal_moves)}</answer>" for _ in range(16)] for t in built]
        # one sample per task (cold caches): the cost of a group of one
        one = [t for t in _timed_each(lambda i: ours.score(case, built[i].state, group[i][0]), len(built))]
        ours_group = make_env("openspiel", {**mode_settings, "cases": [case]})
        sixteen = _timed_each(lambda i: [ours_group.score(case, built[i].state, r) for r in group[i]], len(built))
        n_naive = len(built) if mode == "legal" else min(len(built), 3)
        naive_one = _timed_each(lambda i: naive.score(case, built[i].state, group[i][0]), n_naive)
        # steady-state legal-mode latency: every response of every group, caches warm
        latencies = []
        if mode == "legal":
            for i, t in enumerate(built):
                for r in group[i]:
                    s = time.perf_counter()
                    ours.score(case, t.state, r)
                    latencies.append(time.perf_counter() - s)
            naive_lat = []
            for i, t in enumerate(built):
                for r in group[i]:
                    s = time.perf_counter()
                    naive.score(case, t.state, r)
                    naive_lat.append(time.perf_counter() - s)
        result[mode] = {
            "ours_one_sample_ms": 1000 * statistics.fmean(one),
            "ours_group16_ms": 1000 * statistics.fmean(sixteen),
            "group16_over_one": statistics.fmean(sixteen) / statistics.fmean(one),
            "naive_one_sample_ms": 1000 * statistics.fmean(naive_one),
            "naive_group16_ms_estimate": 16 * 1000 * statistics.fmean(naive_one),
        }
        if latencies:
            latencies.sort()
            naive_lat.sort()
            result[mode].update({
                "ours_scores_per_s": len(latencies) / sum(latencies),
                "naive_scores_per_s": len(naive_lat) / sum(naive_lat),
                "ours_p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
                "naive_p99_ms": 1000 * naive_lat[int(0.99 * (len(naive_lat) - 1))],
            })
    return result


def _timed_each(fn, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return times


def bench_logic(tasks: int) -> list[dict]:
    adapter = make_env("logic", {})
    rows = []
    for case in adapter.cases():
        start = time.perf_counter()
        built = [adapter.make_task(case, i, 10_000 + i) for i in range(tasks)]
        rate = tasks / (time.perf_counter() - start)
        responses = [adapter.reference_answer(t) or "<answer>?</answer>" for t in built]
        start = time.perf_counter()
        for t, r in zip(built, responses):
            adapter.score(case, t.state, r)
        rows.append({"case": case, "tasks_per_s": rate, "scores_per_s": tasks / (time.perf_counter() - start)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--out", default="docs/bench_envs.json")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    settings = {"mcts_simulations": 300, "outcome_playouts": 4}
    report = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "settings": settings, "tasks_per_case": args.tasks, "openspiel": [], "logic": bench_logic(args.tasks)}
    for case in DEFAULT_CASES:
        row = bench_case(case, args.tasks, settings)
        report["openspiel"].append(row)
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()
                          if not isinstance(v, dict)}), flush=True)
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
