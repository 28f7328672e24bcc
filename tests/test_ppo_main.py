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


def test_checks_pass_then_verls_hydra_main_gets_the_same_overrides(no_gpu_import_check, monkeypatch, capsys):
    import verl.trainer.main_ppo as verl_main_ppo

    started = []
    monkeypatch.setattr(verl_main_ppo, "run_ppo", lambda config, task_runner_class: started.append(config))
    # LoRA merged for the rollout: verl's validate_config then needs no vLLM for its LoRA-rank lookup
    args = [*overrides(ROLLOUT_LORA_MERGE="1"), "trainer.experiment_name=in-process"]
    assert ppo_main.main(args) == 0
    out = capsys.readouterr().out
    assert out.index("pre-flight: ok") < out.index(ppo_main.PREFLIGHT_DONE)
    assert "All configuration checks passed" in out  # verl's own validate_config ran on the composed config
    (config,) = started
    assert config.trainer.experiment_name == "in-process" and config.actor_rollout_ref.model.lora.merge is True
    assert config.data.custom_cls.name == "DynamicEnvDataset"


def test_a_failing_check_stops_before_verl(no_gpu_import_check, capsys):
    called = []
    status = ppo_main.main([*overrides(), "data.train_batch_size=7"], run_verl=lambda: called.append(1))
    assert status == 2 and called == []
    assert "must be a multiple of" in capsys.readouterr().err


def test_train_script_runs_it_instead_of_a_separate_preflight(tmp_path):
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", PREFLIGHT_IN_PROCESS="1")
    assert argv[1:3] == ["-m", "verl_ext.launch.ppo_main"]
    assert argv[3:] == overrides()  # the same overrides verl's main_ppo gets by default
    env = {**os.environ, "PREFLIGHT_IN_PROCESS": "1", "RUN_PROFILE": "smoke", "LOG_DIR": str(tmp_path),
           "TRAIN_BATCH_SIZE": "7", "MODEL_PATH": str(tmp_path)}
    done = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh")], capture_output=True, text=True,
                          env=env, cwd=REPO)
    assert done.returncode == 2, done.stdout + done.stderr  # pipefail: the check's status, not the log tee's
    assert "pre-flight:" in done.stderr and "Traceback" not in done.stderr
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "PREFLIGHT_IN_PROCESS": "yes"})
    assert bad.returncode == 2 and "PREFLIGHT_IN_PROCESS must be one of: 1 0; got 'yes'" in bad.stderr
