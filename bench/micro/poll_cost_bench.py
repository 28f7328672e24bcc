"""What one look for finished rollouts costs (ROLLOUT_POLL_INTERVAL): TransferQueue's ``kv_list`` with a step's keys.

verl 0.9.1's replay buffer looks at TransferQueue every ``poll_interval`` seconds while a rollout runs: one
``tq.kv_list()`` of every key and tag (trainer/ppo/v1/replay_buffer.py, ``_sync_metadata_from_transfer_queue``), then
a Python pass over them. A shorter interval ends the generation phase sooner after the last sample is done (on
average half an interval), at the price of more looks: each is a round trip to TransferQueue's controller, which
also serves the agent-loop workers' puts. This bench starts a local Ray and TransferQueue (its default config, as
verl's ``tq.init`` does), puts one step's keys with tags shaped like verl's (a prompt key per group with its
status, a trajectory key per sample) and times ``kv_list`` alone and verl's whole look (its replay buffer's
``_sync_metadata_from_transfer_queue``: ``kv_list`` and the pass over the result).

    python bench/micro/poll_cost_bench.py --prompts 128 --samples 8 --out poll_cost.json     # the realistic load
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def step_keys(prompts: int, samples: int) -> tuple[list[str], list[dict], list[str], list[dict]]:
    """One step's keys and tags: a prompt key per group, a trajectory key per sample."""
    prompt_keys = [f"prompt-{i}" for i in range(prompts)]
    prompt_tags = [{"is_prompt": True, "status": "running", "global_steps": 1} for _ in prompt_keys]
    trajectory_keys = [f"prompt-{i}-sample-{j}" for i in range(prompts) for j in range(samples)]
    trajectory_tags = [{"global_steps": 1, "response_length": 300, "score": 0.0} for _ in trajectory_keys]
    return prompt_keys, prompt_tags, trajectory_keys, trajectory_tags


def verl_buffer() -> Any:
    """verl's own ``ReplayBuffer`` with only what its look fills (its ``__init__`` wants a trainer's config): the look
    is its ``_sync_metadata_from_transfer_queue``, ``kv_list`` then the pass over the result."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    buffer = object.__new__(ReplayBuffer)
    buffer.partitions = defaultdict(dict)  # as ReplayBuffer.__init__ sets them (replay_buffer.py:184-190)
    buffer.pending_keys, buffer.running_keys = defaultdict(set), defaultdict(set)
    buffer.finished_keys, buffer.failure_keys = defaultdict(set), defaultdict(set)
    buffer.prompt_global_steps = defaultdict(dict)
    return buffer


def seconds(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": 1000 * statistics.median(ordered), "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))]}


def measure(prompts: int, samples: int, looks: int) -> dict[str, Any]:
    import ray
    import transfer_queue as tq

    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR")
    try:
        started = time.perf_counter()
        tq.init()
        init_s = time.perf_counter() - started
        prompt_keys, prompt_tags, trajectory_keys, trajectory_tags = step_keys(prompts, samples)
        tq.kv_batch_put(keys=prompt_keys, partition_id="train", tags=prompt_tags)
        tq.kv_batch_put(keys=trajectory_keys, partition_id="train", tags=trajectory_tags)
        buffer = verl_buffer()
        for _ in range(3):  # warm-up
            buffer._sync_metadata_from_transfer_queue()
        lists, whole = [], []
        for _ in range(looks):
            begin = time.perf_counter()
            listing = tq.kv_list()
            lists.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            buffer._sync_metadata_from_transfer_queue()
            whole.append(time.perf_counter() - begin)
        keys = sum(len(items) for items in listing.values())
    finally:
        ray.shutdown()
    look = statistics.median(whole)
    return {
        "prompts": prompts, "samples": samples, "keys": keys, "looks": looks, "tq_init_s": init_s,
        "kv_list": seconds(lists), "look": seconds(whole),
        # the share of the driver's time a rollout phase spends looking, per interval (the controller's is similar)
        "busy_share_by_interval_s": {str(interval): look / (interval + look) for interval in (0.01, 0.02, 0.05, 0.1)},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--looks", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    for name in ("prompts", "samples", "looks"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args.prompts, args.samples, args.looks)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
