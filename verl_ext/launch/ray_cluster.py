"""Wait until a Ray cluster has the nodes and GPUs a multi-node run needs (used by train/slurm/multinode.sbatch).

    python -m verl_ext.launch.ray_cluster wait --address 10.0.0.1:6379 --nodes 2 --gpus 16 --timeout 300

Connects as a Ray driver (retrying while the head is still starting), polls the alive nodes and the cluster's
GPUs, disconnects, and exits 0 once both reach the targets. After ``--timeout`` seconds it exits 1 with one line
naming what joined and where the `ray start` logs are, so a node that never joined is found in seconds instead
of after verl failed to place its workers.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable

EXIT_TIMEOUT = 1


@dataclass(frozen=True)
class ClusterState:
    """What the cluster has right now."""

    nodes: int
    gpus: int


def wait_for_cluster(
    connect: Callable[[], None],
    state: Callable[[], ClusterState],
    nodes: int,
    gpus: int,
    timeout: float,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> ClusterState | None:
    """Connect (retrying on ConnectionError until the deadline), then poll ``state`` until it has ``nodes`` alive
    nodes and ``gpus`` GPUs. Returns the final state, or None on timeout (after logging what it last saw)."""
    deadline = clock() + timeout
    last: ClusterState | None = None
    connected = False
    while True:
        if not connected:
            try:
                connect()
                connected = True
            except ConnectionError as err:
                if clock() >= deadline:
                    log(f"no Ray head answered within {timeout:.0f} s: {err}")
                    return None
        if connected:
            now = state()
            if now != last:
                log(f"ray cluster: {now.nodes}/{nodes} nodes, {now.gpus}/{gpus} GPUs")
                last = now
            if now.nodes >= nodes and now.gpus >= gpus:
                return now
            if clock() >= deadline:
                log(f"ray cluster has {now.nodes} of {nodes} nodes and {now.gpus} of {gpus} GPUs after {timeout:.0f} s")
                return None
        sleep(poll)


def _ray_functions(address: str) -> tuple[Callable[[], None], Callable[[], ClusterState], Callable[[], None]]:
    """connect / state / disconnect for a real cluster (ray imported here: the module itself needs no ray)."""
    import ray

    def connect() -> None:
        # ray.init blocks for minutes on an address nobody listens on yet: knock on the GCS port first
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
                pass
        except (OSError, ValueError) as err:
            raise ConnectionError(f"{address}: {err}") from err
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)

    def state() -> ClusterState:
        alive = [node for node in ray.nodes() if node.get("Alive")]
        return ClusterState(nodes=len(alive), gpus=int(ray.cluster_resources().get("GPU", 0)))

    return connect, state, ray.shutdown


def main(argv: list[str] | None = None) -> int:
    """`wait`: exit 0 when the cluster is complete, 1 on timeout."""
    parser = argparse.ArgumentParser(prog="python -m verl_ext.launch.ray_cluster", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wait = sub.add_parser("wait", help="wait until the cluster has --nodes alive nodes and --gpus GPUs")
    wait.add_argument("--address", required=True, help="the head's GCS address, host:port")
    wait.add_argument("--nodes", type=int, required=True)
    wait.add_argument("--gpus", type=int, required=True)
    wait.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    wait.add_argument("--logs", default="", help="where the `ray start` logs are, named in the timeout message")
    args = parser.parse_args(argv)
    for flag, value, ok, expected in (("--nodes", args.nodes, args.nodes >= 1, "at least 1"),
                                      ("--gpus", args.gpus, args.gpus >= 0, "0 or more"),
                                      ("--timeout", args.timeout, args.timeout > 0, "more than 0 seconds")):
        if not ok:
            parser.error(f"{flag} {value}: expected {expected}")
    connect, state, disconnect = _ray_functions(args.address)
    try:
        final = wait_for_cluster(connect, state, args.nodes, args.gpus, args.timeout,
                                 log=lambda line: print(line, flush=True))  # fmt: skip
    finally:
        disconnect()
    if final is None:
        where = f"; ray start logs: {args.logs}" if args.logs else ""
        print(f"ray cluster at {args.address} is incomplete{where}", file=sys.stderr)
        return EXIT_TIMEOUT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
