"""bench/learning/ray_cluster.sh: a driver stops the Ray clusters its runs started, and only those."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "learning" / "ray_cluster.sh"


def _fake_cluster(temp_dir: Path, ignore_term: bool = False) -> subprocess.Popen:
    """A process naming temp_dir in its arguments with children that do not (as the raylet's agents do not)."""
    trap = 'trap "" TERM; ' if ignore_term else ""
    return subprocess.Popen(["bash", "-c", f"{trap}sleep 300 & sleep 300 & wait", f"{temp_dir}/session/raylet"])


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    return [int(p) for p, parent in (line.split() for line in out.splitlines()) if int(parent) == pid]


def _alive(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def _stop(temp_dir: Path, port: str = "6390", grace: int = 5) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'source "{SCRIPT}" && stop_ray_cluster "$1" "$2" {grace}', "stop",
                           str(temp_dir), port], capture_output=True, text=True, timeout=60, check=False)


def _wait_for_children(proc: subprocess.Popen, count: int) -> list[int]:
    for _ in range(100):
        children = _children(proc.pid)
        if len(children) >= count:
            return children
        time.sleep(0.05)
    raise AssertionError(f"the fake cluster {proc.pid} did not start its children")


def test_a_cluster_and_its_descendants_stop_and_another_cluster_stays(tmp_path):
    ours, other = _fake_cluster(tmp_path / "ray-6390"), _fake_cluster(tmp_path / "ray-6391")
    # the Ray client server names only the GCS address; the other cluster's port ends in the same digits
    client = subprocess.Popen(["bash", "-c", "sleep 300; :", "ray.util.client.server", "--address=10.0.0.1:6390",
                               "--port=10001"])
    other_client = subprocess.Popen(["bash", "-c", "sleep 300; :", "ray.util.client.server",
                                     "--address=10.0.0.1:16390"])
    try:
        our_children, other_children = _wait_for_children(ours, 2), _wait_for_children(other, 2)
        _wait_for_children(client, 1)
        done = _stop(tmp_path / "ray-6390", port="6390")
        assert done.returncode == 0, done.stderr
        ours.wait(10)
        client.wait(10)
        assert not any(_alive(pid) for pid in our_children)
        assert other.poll() is None and all(_alive(pid) for pid in other_children) and other_client.poll() is None
    finally:
        for proc in (ours, other, client, other_client):
            subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
            proc.kill()
            proc.wait(10)


def test_processes_that_ignore_sigterm_are_killed_after_the_grace(tmp_path):
    stubborn = _fake_cluster(tmp_path / "ray-6392", ignore_term=True)
    try:
        children = _wait_for_children(stubborn, 2)
        started = time.monotonic()
        assert _stop(tmp_path / "ray-6392", port="6392", grace=1).returncode == 0
        stubborn.wait(10)
        assert time.monotonic() - started < 20
        assert not any(_alive(pid) for pid in children)
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(stubborn.pid)], check=False)
        stubborn.kill()
        stubborn.wait(10)


def test_no_cluster_and_bad_arguments_are_handled():
    assert _stop(Path("/tmp/verl-ext-ray-none-such"), port="6399").returncode == 0
    short = _stop(Path("/tmp"))
    assert short.returncode == 2 and "absolute path of more than 8 characters" in short.stderr
    no_port = _stop(Path("/tmp/verl-ext-ray-none-such"), port="63x0")
    assert no_port.returncode == 2 and "PORT must be a port number, got '63x0'" in no_port.stderr
