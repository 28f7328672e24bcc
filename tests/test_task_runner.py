"""TASK_RUNNER=driver: verl 0.9.1's TaskRunner runs in the driver process (verl_ext/patches/task_runner.py) with
the environment Ray gives it as an actor, and verl's real TaskRunnerV1 gets as far there as it does as an actor
on a machine without a GPU (TransferQueue, the trainer, our dataset, then verl's GPU resource check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from verl_ext.launch.ppo_main import split_options
from verl_ext.patches.task_runner import DRIVER_MARK, DriverTaskRunner, apply_actor_environment, original_class
from verl_ext.tiny_model import build_qwen2

from bench_scripts import load_bench_script
from test_train_scripts import dry_run, overrides_of

REPO = Path(__file__).resolve().parents[1]


class Runner:
    def __init__(self) -> None:
        self.runs: list[object] = []

    def run(self, config: object) -> None:
        self.runs.append(config)


def test_the_stand_in_builds_the_decorated_class_and_refuses_what_is_not_one():
    actor_class = ray.remote(Runner)  # decorating needs no Ray cluster
    assert original_class(actor_class) is Runner
    handle = DriverTaskRunner(actor_class).remote()  # a Runner built in this process, its run bound to it
    handle.run.method("config")
    assert handle.run.method.__self__.runs == ["config"]
    with pytest.raises(TypeError, match="is not a Ray actor class: TASK_RUNNER=driver needs .*use TASK_RUNNER=actor"):
        DriverTaskRunner(Runner)
    with pytest.raises(RuntimeError, match=r"TASK_RUNNER=driver cannot .* \['runtime_env'\].*use TASK_RUNNER=actor"):
        DriverTaskRunner(actor_class).options(runtime_env={"nsight": {}})


def test_the_actor_environment_is_applied(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("VERL_EXT_PROBE", raising=False)
    threads = torch.get_num_threads()
    try:
        apply_actor_environment({"env_vars": {"VERL_EXT_PROBE": "1", "NCCL_DEBUG": "WARN"}})
        assert os.environ["VERL_EXT_PROBE"] == "1" and os.environ["NCCL_DEBUG"] == "WARN"
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        torch.set_num_threads(threads)
        apply_actor_environment(None)  # a job without a runtime_env; a set OMP_NUM_THREADS stays
        assert os.environ["OMP_NUM_THREADS"] == "3" and torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(threads)


def test_the_driver_imports_the_modules_a_ray_worker_would_import_from_verl_external_modules(monkeypatch, tmp_path):
    """A fresh actor's ``import verl`` imports VERL_USE_EXTERNAL_MODULES; the driver imported verl before the
    variable was set, so the stand-in imports them (the train scripts' verl patches reach the trainer that way)."""
    (tmp_path / "verl_ext_probe_module.py").write_text("import os\nos.environ['VERL_EXT_PROBE_IMPORTED'] = '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("VERL_EXT_PROBE_IMPORTED", "0")  # setenv: the test's end restores both as they were
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "")
    monkeypatch.setenv("OMP_NUM_THREADS", str(os.environ.get("OMP_NUM_THREADS", "2")))
    apply_actor_environment({"env_vars": {"VERL_USE_EXTERNAL_MODULES": "verl_ext_probe_module"}})
    assert os.environ["VERL_EXT_PROBE_IMPORTED"] == "1" and "verl_ext_probe_module" in sys.modules
    monkeypatch.delitem(sys.modules, "verl_ext_probe_module")


@pytest.mark.parametrize("argv, options, rest", [
    (["a=1"], {"preflight": True, "task_runner": "actor", "transfer_queue_start": "serial",
               "vllm_model_info": "off"}, ["a=1"]),
    (["--task-runner", "driver", "a=1"], {"preflight": True, "task_runner": "driver",
                                          "transfer_queue_start": "serial", "vllm_model_info": "off"}, ["a=1"]),
    (["--no-preflight", "--task-runner=driver", "--vllm-model-info", "warm", "--", "a=1"],
     {"preflight": False, "task_runner": "driver", "transfer_queue_start": "serial", "vllm_model_info": "warm"},
     ["a=1"]),
])  # fmt: skip
def test_launcher_options(argv, options, rest):
    assert split_options(argv) == (options, rest)


@pytest.mark.parametrize("argv, message", [
    (["--task-runner", "ray"], "--task-runner (TASK_RUNNER) must be one of actor, driver, got 'ray'"),
    (["--task-runner"], "got ''"), (["--fast"], "unknown option '--fast'"),
    (["--vllm-model-info", "cold"], "--vllm-model-info (ROLLOUT_MODEL_INFO) must be one of off, warm, got 'cold'"),
])  # fmt: skip
def test_bad_launcher_options_are_named(argv, message):
    with pytest.raises(ValueError) as err:
        split_options(argv)
    assert message in str(err.value)


@pytest.mark.parametrize("env, module, options", [
    ({}, "verl_ext.launch.ppo_main", ["--task-runner", "driver", "--transfer-queue-start", "overlap"]),
    ({"TASK_RUNNER": "actor"}, "verl_ext.launch.ppo_main", ["--transfer-queue-start", "overlap"]),
    ({"PREFLIGHT_IN_PROCESS": "0"}, "verl_ext.launch.ppo_main",
     ["--no-preflight", "--task-runner", "driver", "--transfer-queue-start", "overlap"]),
    ({"PREFLIGHT_IN_PROCESS": "0", "TASK_RUNNER": "actor", "TRANSFER_QUEUE_START": "serial"},
     "verl_ext.launch.ppo_main", ["--no-preflight", "--vllm-model-info", "warm"]),  # the model-info warm-up alone
    ({"PREFLIGHT_IN_PROCESS": "0", "TASK_RUNNER": "actor", "TRANSFER_QUEUE_START": "serial",
      "ROLLOUT_MODEL_INFO": "off"}, "verl.trainer.main_ppo", []),
])  # fmt: skip
def test_train_script_passes_the_switch(env, module, options):
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)
    assert argv[1:3] == ["-m", module]
    assert argv[3:3 + len(options)] == options
    assert overrides_of(argv) == overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke"))


def test_train_script_refuses_an_unknown_task_runner():
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "TASK_RUNNER": "thread"})
    assert bad.returncode == 2 and "TASK_RUNNER must be one of: actor driver; got 'thread'" in bad.stderr


# verl's run_ppo twice in one Ray cluster, with a probe in place of TaskRunnerV1: once as verl starts it (a Ray
# actor), once through the stand-in. Each run records what the runner sees.
PROBE = """
import json, os, sys
import ray, torch
import verl.trainer.main_ppo as main_ppo
from verl_ext.launch.preflight import compose
from verl_ext.patches.task_runner import DriverTaskRunner

@ray.remote
class Probe:
    def run(self, config):
        env_vars = ray.get_runtime_context().runtime_env.get("env_vars", {})
        from verl.trainer.ppo.v1 import trainer_base  # patched by VERL_USE_EXTERNAL_MODULES's module on import
        seen = {"pid": os.getpid(), "cwd": os.getcwd(), "omp": os.environ.get("OMP_NUM_THREADS"),
                "patched": getattr(trainer_base.PPOTrainer, "_verl_ext_on_policy_update", False),
                "threads": torch.get_num_threads(), "env": {key: os.environ.get(key) for key in env_vars},
                "job_env": env_vars, "experiment": config.trainer.experiment_name}
        with open(os.environ["PROBE_OUT"], "a") as out:
            out.write(json.dumps(seen) + "\\n")

config = compose("ppo_trainer", ["ray_kwargs.ray_init.num_cpus=4", "trainer.experiment_name=probe",
                                  "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES="
                                  "verl_ext.patches.on_policy_update"])  # the train scripts' OLD_LOG_PROB_PASS=auto
main_ppo.run_ppo(config, task_runner_class=Probe)
main_ppo.run_ppo(config, task_runner_class=DriverTaskRunner(Probe))
print("DRIVER_PID", os.getpid())
"""


@pytest.mark.slow
def test_the_runner_sees_in_the_driver_what_it_sees_as_a_ray_actor(tmp_path):
    out = tmp_path / "probe.jsonl"
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "RAY_ADDRESS")}
    env.update(PROBE_OUT=str(out), RAY_DEDUP_LOGS="0")  # a local Ray cluster of its own
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    driver_pid = int(done.stdout.split("DRIVER_PID ", 1)[1].split()[0])
    as_actor, in_driver = (json.loads(line) for line in out.read_text().splitlines())
    assert as_actor["pid"] != driver_pid and in_driver["pid"] == driver_pid
    assert DRIVER_MARK in done.stdout
    # verl's runtime env for its actors (constants_ppo.py:105-154: TOKENIZERS_PARALLELISM, VLLM_*, HCCL_*, ...)
    assert {"TOKENIZERS_PARALLELISM", "VLLM_LOGGING_LEVEL"} <= in_driver["job_env"].keys()
    assert in_driver["env"] == as_actor["env"] == {key: str(v) for key, v in as_actor["job_env"].items()}
    for key in ("cwd", "omp", "threads", "experiment"):
        assert in_driver[key] == as_actor[key], key
    assert as_actor["patched"] and in_driver["patched"]  # the job's verl patches reach the trainer either way
    assert in_driver["omp"] == "1" and in_driver["threads"] == 1


def run_up_to_the_gpu_check(tmp_path: Path, tokenizer_dir: Path, **knobs: str) -> tuple[list[str], str]:
    """openspiel-ppo.sh's command (without the pre-flight: no vLLM here) on a tiny model in a local Ray cluster of
    its own, run until it fails at verl's GPU check; its argv and its console output."""
    model = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir)
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", PREFLIGHT_IN_PROCESS="0", MODEL_PATH=str(model),
                   GAME_TYPES="tic_tac_toe", CHECKPOINT_DIR=str(tmp_path / "checkpoints"), **knobs)
    command = [sys.executable, *argv[1:], "trainer.logger=[console]", "ray_kwargs.ray_init.num_cpus=8",
               "transfer_queue.backend.SimpleStorage.num_data_storage_units=2"]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # a local cluster of its own
    env["RAY_DEDUP_LOGS"] = "0"
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=400)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    return argv, output


@pytest.mark.slow
def test_verls_task_runner_runs_in_the_driver_up_to_the_gpu_check(tmp_path, tokenizer_dir):
    """The real TaskRunnerV1 in the driver: TransferQueue's actors, the trainer, the tokenizer and our
    DynamicEnvDataset (train and val), then verl's resource pool asks for the GPU this machine does not have."""
    argv, output = run_up_to_the_gpu_check(tmp_path, tokenizer_dir, TASK_RUNNER="driver")
    assert argv[3:5] == ["--no-preflight", "--task-runner"]  # no vLLM here for the pre-flight's import check
    assert DRIVER_MARK in output and "(TaskRunnerV1 pid=" not in output, output[-3000:]
    lines = output.splitlines()
    assert any(line.startswith("{'actor_rollout_ref': {") for line in lines)  # verl's config print, unprefixed
    assert lines.count("Using dataset class: DynamicEnvDataset") == 2, output[-3000:]  # train and val, here
    assert "ValueError: Total available GPUs 0 is less than total desired GPUs 1" in output, output[-3000:]
    assert "RayTaskError" not in output  # raised in this process, not unwrapped from an actor


def test_the_cpu_bench_times_each_phase_from_the_runs_output(tmp_path):
    bench = load_bench_script("task_runner_startup")
    actor = bench.launch_command("actor", tmp_path / "model", "tic_tac_toe", tmp_path / "ckpt")
    driver = bench.launch_command("driver", tmp_path / "model", "tic_tac_toe", tmp_path / "ckpt")
    assert actor[1:3] == ["-m", "verl.trainer.main_ppo"] and actor[-3:] == bench.CPU_OVERRIDES
    assert driver[1:6] == ["-m", "verl_ext.launch.ppo_main", "--no-preflight", "--task-runner", "driver"]
    assert driver[6:] == actor[3:]  # the same overrides
    lines = ["2026-11-25 10:00:00.000 | [verl-ext] launch: train script started",
             "2026-11-25 10:00:09.000 | 2026-11-25 10:00:08,500\tINFO worker.py:2038 -- Started a local Ray instance.",
             "2026-11-25 10:00:10.250 | [verl-ext] launch: TaskRunner running in the driver process (TASK_RUNNER=driver)",
             "2026-11-25 10:00:10.500 | {'actor_rollout_ref': {'actor': {'_target_': 'x'}}}",
             "2026-11-25 10:00:21.000 | Using dataset class: DynamicEnvDataset",
             "2026-11-25 10:00:22.000 | ValueError: Total available GPUs 0 is less than total desired GPUs 1",
             "2026-11-25 10:00:22.400 | Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    run = {"mode": "driver", **bench.measure(lines, 1)}
    assert run["phases_s"] == {"Ray started -> TaskRunner running": 2.0, "TaskRunner running -> datasets built": 10.5,
                               "launch -> datasets built": 21.0}
    assert run["to_gpu_check_s"] == 22.0 and run["reached_gpu_check"] is True
    stopped = {"mode": "actor", **bench.measure(lines[:3], -9)}  # killed before the check: no total, not summarised
    assert stopped["reached_gpu_check"] is False and stopped["to_gpu_check_s"] is None
    summary = bench.summary([run, stopped])
    assert summary["driver"] == {"runs": 1, "median_s": {**run["phases_s"], "launch -> GPU check": 22.0}}
    assert summary["actor"]["runs"] == 0
    assert "| driver | 1 | 2.0 | 10.5 | 21.0 | 22.0 |" in bench.markdown({"summary": summary})
