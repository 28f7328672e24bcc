"""TRANSFER_QUEUE_START=overlap (verl_ext/patches/transfer_queue_start.py): verl 0.9.1's TaskRunner starts
TransferQueue in a thread while its sync trainer starts the workers, and waits for it before the first user."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import transfer_queue
import verl.trainer.main_ppo as verl_main_ppo
import verl.trainer.ppo.v1 as verl_v1
from omegaconf import OmegaConf

from verl_ext.launch import ppo_main
from verl_ext.patches.task_runner import DriverTaskRunner, original_class, use_driver_task_runner
from verl_ext.patches.transfer_queue_start import (OVERLAP_MARK, READY_MARK, SERIAL_MARK, OverlappedTaskRunner,
                                                  use_overlapped_transfer_queue)

from test_task_runner import run_up_to_the_gpu_check
from test_train_scripts import dry_run

REPO = Path(__file__).resolve().parents[1]
# OverlappedTaskRunner.run is verl 0.9.1's TaskRunnerV1.run with tq.init moved; a verl whose run differs
# must be read again before this switch may replace it
VERL_RUN_SHA256 = "26be986901db888bb7ccbec7a7b8eb90365de42a426e6fbf119e6e8d445dde7c"


class Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[str] = []

    def add(self, event: str) -> None:
        with self.lock:
            self.seen.append(event)


def fake_stack(monkeypatch, events: Events, tq_seconds: float = 0.3, tq_error: Exception | None = None,
               init_error: Exception | None = None) -> None:
    """transfer_queue, verl's sync trainer and the agent-loop manager replaced by recorders; run() is ours."""

    def tq_init(conf):
        events.add("tq.init start")
        time.sleep(tq_seconds)
        if tq_error:
            raise tq_error
        events.add("tq.init end")

    class Trainer:
        def __init__(self, config):
            events.add("trainer built")
            self.logger = SimpleNamespace(finish=lambda exit_code: events.add(f"tracking finished {exit_code}"))

        def init(self):
            events.add("trainer.init start")
            time.sleep(tq_seconds / 3)
            if init_error:
                raise init_error
            events.add("trainer.init end")

        def fit(self, manager):
            events.add(f"fit {manager}")

    monkeypatch.setattr(transfer_queue, "init", tq_init)
    monkeypatch.setattr(transfer_queue, "close", lambda: events.add("tq.close"))
    monkeypatch.setattr(verl_v1, "get_trainer_cls", lambda mode: Trainer)
    monkeypatch.setattr(OverlappedTaskRunner, "init_agent_loop_manager",
                        lambda self: (events.add("agent loop manager"), setattr(self, "agent_loop_manager", "alm")))


def config(mode: str = "sync"):
    return OmegaConf.create({"trainer": {"v1": {"trainer_mode": mode}},
                             "transfer_queue": {"enable": False, "backend": {"storage_backend": "SimpleStorage"}}})


def test_transfer_queue_starts_beside_the_trainer_and_is_ready_before_its_first_user(monkeypatch, capsys):
    events = Events()
    fake_stack(monkeypatch, events)
    OverlappedTaskRunner().run(config())
    seen = events.seen
    assert seen.index("trainer.init start") < seen.index("tq.init end")  # the two start-ups overlap
    assert seen.index("tq.init end") < seen.index("agent loop manager") < seen.index("fit alm")
    assert seen[-2:] == ["tracking finished 0", "tq.close"]
    out = capsys.readouterr().out
    assert OVERLAP_MARK in out and f"{READY_MARK} after 0." in out
    assert "'enable': True" in out  # verl's config print, with TransferQueue switched on as verl's run does


def test_a_failing_trainer_still_waits_for_transfer_queue_before_closing_it(monkeypatch):
    events = Events()
    fake_stack(monkeypatch, events, init_error=ValueError("Total available GPUs 0 is less than total desired GPUs 1"))
    with pytest.raises(ValueError, match="Total available GPUs 0"):
        OverlappedTaskRunner().run(config())
    seen = events.seen
    assert "agent loop manager" not in seen
    assert "tracking finished 1" in seen and seen[-2:] == ["tq.init end", "tq.close"]


def test_a_failing_transfer_queue_start_stops_the_run_before_the_agent_loop(monkeypatch):
    events = Events()
    fake_stack(monkeypatch, events, tq_error=RuntimeError("controller died"))
    with pytest.raises(RuntimeError, match="controller died"):
        OverlappedTaskRunner().run(config())
    assert "agent loop manager" not in events.seen and events.seen[-1] == "tq.close"


def test_async_trainer_modes_keep_verls_order(monkeypatch, capsys):
    calls = []
    verl_runner = original_class(verl_main_ppo.TaskRunnerV1)
    monkeypatch.setattr(verl_runner, "run", lambda self, cfg: calls.append(cfg.trainer.v1.trainer_mode))
    OverlappedTaskRunner().run(config("separate_async"))
    assert calls == ["separate_async"]
    assert SERIAL_MARK in capsys.readouterr().out


def test_it_replaces_verls_runner_and_composes_with_the_driver_stand_in():
    module = SimpleNamespace(TaskRunnerV1=verl_main_ppo.TaskRunnerV1)
    use_overlapped_transfer_queue(module)
    assert original_class(module.TaskRunnerV1) is OverlappedTaskRunner
    with pytest.raises(TypeError, match="replaces verl 0.9.1's TaskRunnerV1.*TRANSFER_QUEUE_START=serial"):
        use_overlapped_transfer_queue(module)  # twice, or over anything else, is refused
    use_driver_task_runner(module)  # ppo_main's order: overlap first, then the driver stand-in
    assert isinstance(module.TaskRunnerV1, DriverTaskRunner)
    assert module.TaskRunnerV1.runner_class is OverlappedTaskRunner


def test_verls_run_is_still_the_one_this_switch_reorders():
    source = inspect.getsource(original_class(verl_main_ppo.TaskRunnerV1).run)
    assert hashlib.sha256(source.encode()).hexdigest() == VERL_RUN_SHA256, source


@pytest.mark.parametrize("argv, options", [
    (["a=1"], {"preflight": True, "task_runner": "actor", "transfer_queue_start": "serial", "vllm_model_info": "off"}),
    (["--transfer-queue-start", "overlap", "--task-runner=driver", "a=1"],
     {"preflight": True, "task_runner": "driver", "transfer_queue_start": "overlap", "vllm_model_info": "off"}),
])  # fmt: skip
def test_launcher_option(argv, options):
    assert ppo_main.split_options(argv) == (options, ["a=1"])
    with pytest.raises(ValueError, match="--transfer-queue-start .TRANSFER_QUEUE_START. must be one of serial, "
                                         "overlap, got 'early'"):
        ppo_main.split_options(["--transfer-queue-start=early"])


def test_train_script_passes_the_switch_and_refuses_an_unknown_value():
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", TASK_RUNNER="actor", PREFLIGHT_IN_PROCESS="0")
    assert argv[1:8] == ["-m", "verl_ext.launch.ppo_main", "--no-preflight", "--transfer-queue-start", "overlap",
                         "--vllm-model-info", "warm"]
    serial = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", TASK_RUNNER="actor", TRANSFER_QUEUE_START="serial",
                     PREFLIGHT_IN_PROCESS="0", ROLLOUT_MODEL_INFO="off")
    assert serial[1:3] == ["-m", "verl.trainer.main_ppo"]  # verl's order: verl's own entry point
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "TRANSFER_QUEUE_START": "early"})
    assert bad.returncode == 2 and "TRANSFER_QUEUE_START must be one of: serial overlap; got 'early'" in bad.stderr


@pytest.mark.slow
def test_verls_runner_as_a_ray_actor_starts_transfer_queue_beside_the_trainer(tmp_path, tokenizer_dir):
    """The real run as verl starts it (a Ray actor, our class pickled to it): TransferQueue's actors start in a
    thread while the trainer builds our datasets and reaches verl's GPU check, and are closed after that error."""
    _, output = run_up_to_the_gpu_check(tmp_path, tokenizer_dir, TASK_RUNNER="actor", TRANSFER_QUEUE_START="overlap")
    runner_lines = [line for line in output.splitlines() if "(OverlappedTaskRunner pid=" in line]
    assert any(OVERLAP_MARK in line for line in runner_lines), output[-3000:]
    assert any(READY_MARK in line for line in runner_lines), output[-3000:]  # waited for before the close
    assert output.count("Using dataset class: DynamicEnvDataset") == 2, output[-3000:]
    assert "ValueError: Total available GPUs 0 is less than total desired GPUs 1" in output, output[-3000:]
