"""bench/profile/monitor.sh samples the machine each second; bench/profile/monitor_summary.py turns the samples into one row per
session step (GPU utilization, busiest processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench_scripts import load_bench_script

REPO = Path(__file__).resolve().parents[1]
monitor_summary = load_bench_script("monitor_summary")

TOP = """\
top - 04:22:00 up 1:00,  0 user,  load average: 1.00, 1.00, 1.00
 9999 root      20   0  1000   100   10 R 999.0   0.1   9:00.00 VLLM::EngineCore
top - 04:22:01 up 1:00,  0 user,  load average: 1.00, 1.00, 1.00
  101 root      20   0  1000   100   10 R  99.0   0.1   0:10.00 VLLM::EngineCore
  102 root      20   0  1000   100   10 S  20.0   0.1   0:01.00 ray::WorkerDict.update_actor
  103 root      20   0  1000   100   10 S  10.0   0.1   0:01.00 /usr/bin/python3 bench/speed/trl_grpo.py --model /m
top - 04:22:02 up 1:00,  0 user,  load average: 1.00, 1.00, 1.00
  101 root      20   0  1000   100   10 R 101.0   0.1   0:11.00 VLLM::EngineCore
  104 root      20   0  1000   100   10 S   5.0   0.1   0:01.00 /usr/bin/python3 -m verl_ext.launch.ppo_main a=b
top - 04:22:03 up 1:00,  0 user,  load average: 1.00, 1.00, 1.00
  102 root      20   0  1000   100   10 R 100.0   0.1   0:02.00 ray::WorkerDict.update_actor
"""
GPU = """\
2026/11/25 04:22:01.100, 40, 1980, 300.5, 20000
2026/11/25 04:22:02.100, 60, 1980, 310.0, 20000
2026/11/25 04:22:03.100, 100, 1755, [N/A], 20000
"""
SESSION = """\
settings under test: SPEED_ENV='' SPEED_ARGS=''
2026-11-25 04:22:02 realistic ours 3 defaults: ok, 2 s
2026-11-25 04:22:03 realistic trl 3: FAILED (exit 1), 1 s
"""


def write_samples(tmp_path: Path) -> Path:
    (tmp_path / "top.txt").write_text(TOP)
    (tmp_path / "gpu.csv").write_text(GPU)
    (tmp_path / "session.txt").write_text(SESSION)
    return tmp_path


def test_each_step_gets_its_gpu_utilization_and_busiest_processes(tmp_path):
    write_samples(tmp_path)
    text = monitor_summary.main([str(tmp_path), "--session", str(tmp_path / "session.txt"), "--timeline", "1"])
    rows = [line for line in text.splitlines() if line.startswith("| realistic")]
    # windows are half-open: 04:22:00 up to 04:22:02; top's first frame (counts since process start) is left out
    assert rows[0] == ("| realistic ours 3 defaults | 2 | 40 | 0% | 1980 | VLLM::EngineCore 99; ray::WorkerDict."
                       "update_actor 20; python bench/speed/trl_grpo.py 10 |")
    assert rows[1] == "| realistic trl 3 | 1 | 60 | 0% | 1980 | VLLM::EngineCore 101; python -m verl_ext.launch.ppo_main 5 |"
    assert "| 04:22:01 | 40 | VLLM::EngineCore 99%, ray::WorkerDict.update_actor 20%, python bench/speed/trl_grpo.py 10% |" \
        in text


def test_a_window_can_be_given_and_bad_input_is_named(tmp_path, capsys):
    write_samples(tmp_path)
    text = monitor_summary.main([str(tmp_path), "--window", "2026-11-25 04:22:03", "2026-11-25 04:22:04"])
    assert "| 2026-11-25 04:22:03 .. 2026-11-25 04:22:04 | 1 | 100 | 100% | 1755 | ray::WorkerDict.update_actor 100 |" \
        in text
    with pytest.raises(SystemExit, match="--window: expected 'YYYY-MM-DD HH:MM:SS' twice"):
        monitor_summary.main([str(tmp_path), "--window", "04:22", "04:23"])
    with pytest.raises(SystemExit):
        monitor_summary.parse_args([str(tmp_path / "missing"), "--session", "s.txt"])
    assert "no top.txt" in capsys.readouterr().err


def sample_frames(directory, at_least: int) -> None:
    """Run bench/profile/monitor.sh on ``directory`` until top.txt holds ``at_least`` frames, then stop it."""
    monitor = subprocess.Popen(["bash", str(REPO / "bench" / "profile" / "monitor.sh"), str(directory)], start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        top = directory / "top.txt"
        while time.monotonic() < deadline and (not top.exists() or top.read_text().count("top - ") < at_least):
            time.sleep(0.2)
    finally:
        os.killpg(monitor.pid, signal.SIGTERM)
        monitor.wait(timeout=10)


def test_monitor_samples_until_it_is_stopped_and_a_second_run_appends(tmp_path):
    sample_frames(tmp_path, 3)
    frames = monitor_summary.read_top(tmp_path / "top.txt", monitor_summary.datetime.now())
    assert len(frames) >= 2 and any(frame.cpu_by_process for frame in frames)
    sample_frames(tmp_path, len(frames) + 3)  # a second job of the same session keeps the first's samples
    again = monitor_summary.read_top(tmp_path / "top.txt", monitor_summary.datetime.now())
    assert len(again) >= len(frames) + 2 and again[:len(frames)] == frames
