"""train/slurm/multinode.sbatch --dry-run: the exact srun / ray start / wait / train commands for an allocation.

Slurm is not here, so the test plays it: SLURM_* variables as sbatch sets them, and a fake `scontrol` that expands
the node list (the only command the dry run executes). The train script's own --dry-run output is composed
against verl 0.9.1's config and pre-flight, with the RAY_ADDRESS the launcher exports.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.launch import ray_cluster
from verl_ext.launch.ppo_main import split_options
from verl_ext.launch.preflight import check_ppo, compose
from verl_ext.launch.ray_cluster import ClusterState, wait_for_cluster

REPO = Path(__file__).resolve().parents[1]
SBATCH = REPO / "train" / "slurm" / "multinode.sbatch"
FAKE_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: unexpected $*" >&2; exit 1; }
case "$3" in
  "gpu[01-02]") printf 'gpu01\\ngpu02\\n' ;;
  "gpu01") echo gpu01 ;;
  *) exit 1 ;;
esac
"""


def dry_run(tmp_path: Path, nodelist: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_", "RUN_PROFILE", "NNODES"))}
    environ.update(PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="42", RUN_PROFILE="smoke")
    if nodelist:
        environ["SLURM_JOB_NODELIST"] = nodelist
    environ.update(env)
    return subprocess.run(["bash", str(SBATCH), "--dry-run", *args], capture_output=True, text=True, env=environ,
                          cwd=tmp_path, timeout=60)  # fmt: skip


def commands(result: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines()]


def test_two_nodes(tmp_path):
    result = dry_run(tmp_path, "gpu[01-02]", "train/scripts/openspiel-ppo.sh", "trainer.total_training_steps=3",
                     SLURM_GPUS_ON_NODE="8", SLURM_CPUS_PER_TASK="64", SLURMD_NODENAME="gpu01",
                     RAY_HEAD_IP="10.1.2.3", PYTHON="/shared/venv/bin/python")  # fmt: skip
    head, wait_head, worker, wait_all, train, main_ppo = commands(result)
    logs = f"{REPO}/logs/slurm-42"
    ray = ["/shared/venv/bin/python", "-m", "ray.scripts.scripts", "start"]
    assert head == ["srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=64", "-w", "gpu01",
                    f"--output={logs}/ray-head-gpu01.log", *ray, "--head", "--node-ip-address=10.1.2.3",
                    "--port=6379", "--num-gpus=8", "--num-cpus=64", "--block", "&"]  # fmt: skip
    wait = ["/shared/venv/bin/python", "-m", "verl_ext.launch.ray_cluster", "wait", "--address", "10.1.2.3:6379",
            "--timeout", "300", "--logs", logs]  # fmt: skip
    assert wait_head == [*wait, "--nodes", "1", "--gpus", "8"]
    assert worker == ["srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=64", "-w", "gpu02",
                      f"--output={logs}/ray-worker-gpu02.log", *ray, "--address=10.1.2.3:6379", "--num-gpus=8",
                      "--num-cpus=64", "--block", "&"]  # fmt: skip
    assert wait_all == [*wait, "--nodes", "2", "--gpus", "16"]
    assert train == ["env", "RAY_ADDRESS=10.1.2.3:6379", "NNODES=2", "N_GPUS_PER_NODE=8", "bash",
                     "train/scripts/openspiel-ppo.sh", "trainer.total_training_steps=3", "trainer.nnodes=2",
                     "trainer.n_gpus_per_node=8"]  # fmt: skip
    assert "Ray head gpu01 (10.1.2.3:6379); 2 node(s) x 8 GPU(s)" in result.stderr
    # the train script's exact main_ppo command joins that cluster and asks verl for all 16 GPUs
    assert main_ppo[:3] == ["/shared/venv/bin/python", "-m", "verl_ext.launch.ppo_main"]
    options, overrides = split_options(main_ppo[3:])
    assert (options["task_runner"], options["transfer_queue_start"]) == ("driver", "overlap")  # start-up defaults
    cfg = compose("ppo_trainer", overrides)
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.total_training_steps) == (2, 8, 3)
    assert cfg.ray_kwargs.ray_init.num_cpus is None  # joining a cluster refuses num_cpus
    assert check_ppo(cfg, check_imports=False, environ={"RAY_ADDRESS": "10.1.2.3:6379"}) == []


def test_one_node_and_the_head_ip_lookup(tmp_path):
    result = dry_run(tmp_path, "gpu01", "train/scripts/logic-grpo.sh", SLURM_GPUS_PER_NODE="h100:4")
    lookup, head, wait_head, train, main_ppo = result.stdout.splitlines()
    assert lookup == ("HEAD_IP=$(srun --nodes=1 --ntasks=1 -w gpu01 hostname --all-ip-addresses | tr ' ' '\\n' "
                      "| grep -v '^127\\.' | grep -m1 -E '^[0-9.]+$')")
    assert "--head --node-ip-address=${HEAD_IP} --port=6379 --num-gpus=4 --block &" in head
    assert "--cpus-per-task" not in head and "--num-cpus" not in head
    logs = f"{REPO}/logs/slurm-42"
    assert wait_head.endswith(f"--address ${{HEAD_IP}}:6379 --timeout 300 --logs {logs} --nodes 1 --gpus 4")
    assert train.endswith("bash train/scripts/logic-grpo.sh trainer.nnodes=1 trainer.n_gpus_per_node=4")
    cfg = compose("ppo_trainer", split_options(shlex.split(main_ppo)[3:])[1])
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (1, 4)


def test_the_head_is_the_node_the_batch_script_runs_on(tmp_path):
    head, _, worker, *_ = commands(dry_run(tmp_path, "gpu[01-02]", "train/scripts/openspiel-ppo.sh",
                                           SLURM_GPUS_ON_NODE="2", SLURMD_NODENAME="gpu02", RAY_HEAD_IP="10.0.0.2",
                                           RAY_PORT="6380"))  # fmt: skip
    assert head[head.index("-w") + 1] == "gpu02" and "--port=6380" in head
    assert worker[worker.index("-w") + 1] == "gpu01" and "--address=10.0.0.2:6380" in worker


@pytest.mark.parametrize(("nodelist", "args", "env", "message"), [
    ("", ["train/scripts/openspiel-ppo.sh"], {"SLURM_GPUS_ON_NODE": "8"},
     "SLURM_JOB_NODELIST is unset: submit with sbatch"),
    ("gpu01", ["train/scripts/openspiel-ppo.sh"], {},
     "GPUs per node unknown (SLURM_GPUS_ON_NODE='', SLURM_GPUS_PER_NODE=''): submit with --gpus-per-node=N"),
    ("gpu01", ["train/scripts/nope.sh"], {"SLURM_GPUS_ON_NODE": "8"}, "no such train script 'train/scripts/nope.sh'"),
    ("gpu01", [], {"SLURM_GPUS_ON_NODE": "8"}, "usage: sbatch train/slurm/multinode.sbatch train/scripts/"),
    ("gpu01", ["train/scripts/openspiel-ppo.sh"], {"SLURM_GPUS_ON_NODE": "8", "SLURMD_NODENAME": "gpu09"},
     "this node (gpu09) is not in the allocation (gpu01)"),
])  # fmt: skip
def test_bad_allocations_are_named(tmp_path, nodelist, args, env, message):
    result = dry_run(tmp_path, nodelist, *args, **env)
    assert result.returncode == 2 and message in result.stderr, result.stderr


# ---------------------------------------------------------------------------------------------------------------
# verl_ext.launch.ray_cluster wait
# ---------------------------------------------------------------------------------------------------------------
class FakeCluster:
    """A head that answers after `up_at` seconds and gains one node (8 GPUs) every `join_every` seconds."""

    def __init__(self, up_at: float, join_every: float, max_nodes: int) -> None:
        self.now, self.up_at, self.join_every, self.max_nodes = 0.0, up_at, join_every, max_nodes

    def connect(self) -> None:
        if self.now < self.up_at:
            raise ConnectionError("connection refused")

    def state(self) -> ClusterState:
        nodes = min(self.max_nodes, 1 + int((self.now - self.up_at) // self.join_every))
        return ClusterState(nodes=nodes, gpus=8 * nodes)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_until_every_node_joined():
    cluster, lines = FakeCluster(up_at=5, join_every=10, max_nodes=3), []
    final = wait_for_cluster(cluster.connect, cluster.state, nodes=3, gpus=24, timeout=60, poll=1,
                             clock=lambda: cluster.now, sleep=cluster.sleep, log=lines.append)  # fmt: skip
    assert final == ClusterState(3, 24) and cluster.now == 25
    assert lines == ["ray cluster: 1/3 nodes, 8/24 GPUs", "ray cluster: 2/3 nodes, 16/24 GPUs",
                     "ray cluster: 3/3 nodes, 24/24 GPUs"]  # fmt: skip


def test_wait_names_what_is_missing_on_timeout():
    cluster, lines = FakeCluster(up_at=0, join_every=1000, max_nodes=2), []
    assert wait_for_cluster(cluster.connect, cluster.state, nodes=2, gpus=16, timeout=30, poll=2,
                            clock=lambda: cluster.now, sleep=cluster.sleep, log=lines.append) is None  # fmt: skip
    assert lines[-1] == "ray cluster has 1 of 2 nodes and 8 of 16 GPUs after 30 s"
    silent = FakeCluster(up_at=10_000, join_every=1, max_nodes=1)
    assert wait_for_cluster(silent.connect, silent.state, nodes=1, gpus=8, timeout=20, poll=5,
                            clock=lambda: silent.now, sleep=silent.sleep, log=lines.append) is None  # fmt: skip
    assert lines[-1] == "no Ray head answered within 20 s: connection refused"


def test_wait_knocks_before_ray_init(capsys):
    """A head that is not listening yet is a quick ConnectionError (ray.init itself would block for minutes)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        connect, _, _ = ray_cluster._ray_functions(f"127.0.0.1:{port}")
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
            connect()
    with pytest.raises(SystemExit):
        ray_cluster.main(["wait", "--address", "h:1", "--nodes", "0", "--gpus", "8"])
    assert "--nodes 0: expected at least 1" in capsys.readouterr().err


def test_a_python_without_ray_stops_before_any_srun(tmp_path):
    """For real (no --dry-run): the interpreter check runs before the first job step."""
    bare = tmp_path / "python-without-verl"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text(f"#!/bin/sh\ntouch {tmp_path / 'srun-ran'}\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_", "PYTHONPATH"))}
    environ.update(PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", SLURM_JOB_NODELIST="gpu01", SLURM_JOB_ID="7",
                   SLURM_GPUS_ON_NODE="8", PYTHON=str(bare), LOG_DIR=str(tmp_path / "logs"))  # fmt: skip
    (tmp_path / "bin" / "scontrol").write_text(FAKE_SCONTROL)
    (tmp_path / "bin" / "scontrol").chmod(0o755)
    result = subprocess.run(["bash", str(SBATCH), "train/scripts/openspiel-ppo.sh"], capture_output=True, text=True,
                            env=environ, cwd=tmp_path, timeout=60)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "cannot import ray, verl, vllm (for ROLLOUT_BACKEND=vllm)." in result.stderr
    assert "PYTHON=/path/to/venv/bin/python sbatch train/slurm/multinode.sbatch train/scripts/openspiel-ppo.sh" in (
        result.stderr
    )
    assert not (tmp_path / "srun-ran").exists() and "Traceback" not in result.stderr
