"""PREFLIGHT_IN_PROCESS=1: verl_ext.launch.ppo_main runs our pre-flight, then verl 0.9.1's own Hydra entry point
with the same overrides in the same process; a failing check stops before verl starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from verl_ext.launch import ppo_main, preflight

from test_train_scripts import dry_run, overrides_of

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_gpu_import_check(monkeypatch):
    """The CPU machine has no vLLM: check everything else, as the GPU machine's pre-flight would."""
    real = preflight.check_ppo
    monkeypatch.setattr(preflight, "check_ppo", lambda cfg, check_imports=True: real(cfg, False))


def overrides(**env: str) -> list[str]:
    return overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env))


# Run in a child interpreter: verl's Hydra entry point reconfigures logging for the whole process, which would
# leave handlers on pytest's captured streams for every later test.
HAND_OFF = """
import json, sys
import verl.trainer.main_ppo as verl_main_ppo
from verl_ext.launch import ppo_main, preflight
real = preflight.check_ppo
preflight.check_ppo = lambda cfg, check_imports=True: real(cfg, False)  # no vLLM on the CPU machine
started = []
verl_main_ppo.run_ppo = lambda config, task_runner_class: started.append(config)
status = ppo_main.main(json.loads(sys.argv[1]))
config = started[0]
print("HANDED", json.dumps([status, config.trainer.experiment_name, config.actor_rollout_ref.model.lora.merge,
                            config.data.custom_cls.name]))
"""


def test_checks_pass_then_verls_hydra_main_gets_the_same_overrides():
    import json
    import sys

    # LoRA merged for the rollout: verl's validate_config then needs no vLLM for its LoRA-rank lookup
    args = [*overrides(ROLLOUT_LORA_MERGE="1"), "trainer.experiment_name=in-process"]
    done = subprocess.run([sys.executable, "-c", HAND_OFF, json.dumps(args)], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.index("pre-flight: ok") < out.index(ppo_main.PREFLIGHT_DONE)
    assert "All configuration checks passed" in out  # verl's own validate_config ran on the composed config
    handed = json.loads(out.split("HANDED ", 1)[1])
    assert handed == [0, "in-process", True, "DynamicEnvDataset"]


def test_a_failing_check_stops_before_verl(no_gpu_import_check, capsys):
    called = []
    status = ppo_main.main([*overrides(), "data.train_batch_size=7"], run_verl=called.append)
    assert status == 2 and called == []
    assert "must be a multiple of" in capsys.readouterr().err


def test_train_script_runs_it_instead_of_a_separate_preflight(tmp_path):
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", PREFLIGHT_IN_PROCESS="1")
    assert argv[1:3] == ["-m", "verl_ext.launch.ppo_main"]
    # the start-up defaults, then the same overrides verl's main_ppo gets
    assert argv[3:9] == ["--task-runner", "driver", "--transfer-queue-start", "overlap", "--vllm-model-info", "warm"]
    assert argv[9:] == overrides()
    env = {**os.environ, "PREFLIGHT_IN_PROCESS": "1", "RUN_PROFILE": "smoke", "LOG_DIR": str(tmp_path),
           "TRAIN_BATCH_SIZE": "7", "MODEL_PATH": str(tmp_path)}
    done = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh")], capture_output=True, text=True,
                          env=env, cwd=REPO)
    assert done.returncode == 2, done.stdout + done.stderr  # pipefail: the check's status, not the log tee's
    assert "pre-flight:" in done.stderr and "Traceback" not in done.stderr
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "PREFLIGHT_IN_PROCESS": "yes"})
    assert bad.returncode == 2 and "PREFLIGHT_IN_PROCESS must be one of: 1 0; got 'yes'" in bad.stderr
