"""bench/learning/gpu_learning.sh model-out / model-in: a model split into parts small enough to come back from the lent
GPU, and carried into a later session, unpacks to the same bytes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "learning" / "gpu_learning.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO)


def test_model_parts_round_trip(tmp_path):
    source = tmp_path / "run" / "sft_hf"
    source.mkdir(parents=True)
    weights = os.urandom(17 * 1024 * 1024)  # over one 15 MiB part
    (source / "model.safetensors").write_bytes(weights)
    (source / "config.json").write_text('{"model_type": "qwen2"}')
    out = tmp_path / "out"
    sent = run("model-out", "sft_hf", OUT=str(out), RUN_DIR=str(tmp_path / "run"))
    assert sent.returncode == 0, sent.stderr
    assert sorted(p.name for p in out.glob("sft_hf.tar.part*")) == ["sft_hf.tar.partaa", "sft_hf.tar.partab"]

    target = tmp_path / "next-session"
    received = run("model-in", str(out), OUT=str(tmp_path / "out2"), RUN_DIR=str(target))
    assert received.returncode == 0, received.stderr
    assert "model-in: sft_hf" in received.stdout
    assert (target / "sft_hf" / "model.safetensors").read_bytes() == weights
    assert (target / "sft_hf" / "config.json").read_text() == '{"model_type": "qwen2"}'


def test_model_in_without_parts_names_the_folder(tmp_path):
    result = run("model-in", str(tmp_path), OUT=str(tmp_path / "out"), RUN_DIR=str(tmp_path / "run"))
    assert result.returncode == 2 and f"no *.tar.partaa in '{tmp_path}'" in result.stderr


def test_detach_runs_from_a_copy_and_wait_reports_it(tmp_path):
    run_dir = tmp_path / "run"
    started = run("detach", "status", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir),
                  DETACH_LOCK=str(tmp_path / "lock"))
    assert started.returncode == 0, started.stderr
    assert "running as pid" in started.stdout
    assert (run_dir / "code" / "bench" / "learning" / "gpu_learning.sh").is_file()
    assert not (run_dir / "code" / ".git").exists()

    waited = run("wait-detached", "60", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir))
    assert waited.returncode == 0, waited.stderr
    assert "wait-detached: ended" in waited.stdout
    assert "model: to do" in waited.stdout  # the recipe's status, printed by the detached job into its log
    assert "no GRPO metrics" in waited.stdout

    stopped = run("stop", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir))
    assert stopped.returncode == 0 and "no detached job running" in stopped.stdout


def test_stop_ends_a_running_detached_job(tmp_path):
    run_dir = tmp_path / "run"
    # a model-in that blocks on a FIFO stands for a long stage
    parts = tmp_path / "parts"
    parts.mkdir()
    os.mkfifo(parts / "m.tar.partaa")
    lock = str(tmp_path / "lock")
    started = run("detach", "model-in", str(parts), OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir),
                  DETACH_LOCK=lock)
    assert started.returncode == 0, started.stderr
    pid = int((run_dir / "detached.pid").read_text())
    os.kill(pid, 0)  # running

    again = run("detach", "status", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir), DETACH_LOCK=lock)
    assert again.returncode == 2 and "already running" in again.stderr
    # a second job on the same host, even in another RUN_DIR, would share verl's weight-sync socket
    other = run("detach", "status", OUT=str(tmp_path / "out"), RUN_DIR=str(tmp_path / "other"), DETACH_LOCK=lock)
    assert other.returncode == 2 and f"pid {pid}, RUN_DIR {run_dir}" in other.stderr
    assert "weight-sync socket" in other.stderr

    stopped = run("stop", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir))
    assert stopped.returncode == 0 and f"ended process group {pid}" in stopped.stdout
    waited = run("wait-detached", "5", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir))
    assert "wait-detached: ended" in waited.stdout
    after = run("detach", "status", OUT=str(tmp_path / "out"), RUN_DIR=str(tmp_path / "other"), DETACH_LOCK=lock)
    assert after.returncode == 0, after.stderr  # the lock of an ended job does not block the next


def test_wait_detached_without_a_job_says_so(tmp_path):
    result = run("wait-detached", "1", OUT=str(tmp_path / "out"), RUN_DIR=str(tmp_path / "run"))
    assert result.returncode == 2 and "nothing was detached" in result.stderr


@pytest.mark.slow
def test_queue_starts_when_the_running_job_ends_and_stop_cancels_it(tmp_path):
    lock, out = str(tmp_path / "lock"), str(tmp_path / "out")
    parts = tmp_path / "parts"
    parts.mkdir()
    os.mkfifo(parts / "m.tar.partaa")  # the first job blocks on it until stopped
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    assert run("detach", "model-in", str(parts), OUT=out, RUN_DIR=str(first), DETACH_LOCK=lock).returncode == 0

    same = run("queue", "status", OUT=out, RUN_DIR=str(first), DETACH_LOCK=lock)
    assert same.returncode == 2 and "already uses RUN_DIR" in same.stderr
    queued = run("queue", "status", OUT=out, RUN_DIR=str(second), DETACH_LOCK=lock)
    assert queued.returncode == 0, queued.stderr
    assert f"when pid {(first / 'detached.pid').read_text().strip()}" in queued.stdout
    assert not (second / "detached.pid").exists()
    still = run("wait-detached", "1", OUT=out, RUN_DIR=str(second))
    assert "still queued" in still.stdout
    twice = run("queue", "status", OUT=out, RUN_DIR=str(second), DETACH_LOCK=lock)
    assert twice.returncode == 2 and "already queued" in twice.stderr

    cancelled = run("queue", "status", OUT=out, RUN_DIR=str(third), DETACH_LOCK=lock)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled the job queued" in run("stop", OUT=out, RUN_DIR=str(third)).stdout

    assert run("stop", OUT=out, RUN_DIR=str(first)).returncode == 0
    waited = run("wait-detached", "60", OUT=out, RUN_DIR=str(second))
    assert waited.returncode == 0, waited.stderr
    assert "wait-detached: ended" in waited.stdout and "model: to do" in waited.stdout
    assert (second / "code" / "bench" / "learning" / "gpu_learning.sh").is_file()
    assert not (third / "detached.pid").exists()  # the cancelled one never started


def test_queue_without_a_running_job_detaches_at_once(tmp_path):
    run_dir = tmp_path / "run"
    started = run("queue", "status", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir), DETACH_LOCK=str(tmp_path / "lock"))
    assert started.returncode == 0 and "running as pid" in started.stdout
    assert "wait-detached: ended" in run("wait-detached", "60", OUT=str(tmp_path / "out"), RUN_DIR=str(run_dir)).stdout
