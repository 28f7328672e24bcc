"""A run that joins a Ray cluster (RAY_ADDRESS) still gets its sample log: the file is named in the job's
runtime_env, because Ray workers inherit the train script's shell only when ray.init starts the cluster itself.

The script runs for real up to verl: a wrapper interpreter passes the interpreter check, runs the pre-flight with
this test's Python, and records the main_ppo argv instead of starting verl.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_interpreter_check import executable
from test_train_scripts import overrides_of
from verl_ext.launch.preflight import main as preflight_main

REPO = Path(__file__).resolve().parents[1]
KEY = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_SAMPLE_LOG="


def launched_argv(tmp_path: Path, **extra: str) -> list[str]:
    """The argv the GRPO script hands to main_ppo, with ``extra`` in the environment."""
    recorded = tmp_path / "argv.txt"
    script = ("#!/bin/bash\n"
              '[[ "$1" == *launch/interpreter.py ]] && exit 0\n'
              'for a in "$@"; do\n'
              '  if [[ "$a" == verl.trainer.main_ppo || "$a" == verl_ext.launch.ppo_main ]]; then\n'
              f'    printf "%s\\n" "$@" > {recorded}; exit 0\n'
              "  fi\n"
              "done\n"
              f'exec {sys.executable} "$@"\n')
    wrapper = executable(tmp_path / "python", script)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RUN_PROFILE") and not k.startswith("VERL_EXT_SAMPLE")}
    env.update(PYTHON=str(wrapper), RUN_PROFILE="smoke", LOG_DIR=str(tmp_path / "logs"), **extra)
    result = subprocess.run(["bash", str(REPO / "train" / "scripts" / "openspiel-ppo.sh")], capture_output=True,
                            text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return recorded.read_text().splitlines()


def test_a_run_joining_a_cluster_names_its_sample_log_in_the_runtime_env(tmp_path):
    argv = launched_argv(tmp_path, RAY_ADDRESS="127.0.0.1:6390", VERL_EXT_SAMPLE_TEXTS="3")
    named = [arg for arg in argv if arg.startswith(KEY)]
    assert len(named) == 1
    path = named[0][len(KEY):].strip("'")
    assert path.startswith(str(tmp_path / "logs")) and path.endswith(".samples.jsonl")
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_SAMPLE_TEXTS='3'" in argv
    # and the step count: without it the reward workers number training samples by bursts between validations
    # (5 blocks for 100 steps on 2026-11-27), and `verl-ext samples --step N` finds nothing
    assert any(arg.startswith("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_SAMPLES_PER_STEP=")
               for arg in argv)
    # verl's Hydra schema takes the command as launched
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 0


def test_a_resumed_run_joining_a_cluster_passes_its_step_offset(tmp_path):
    argv = launched_argv(tmp_path, RAY_ADDRESS="127.0.0.1:6390", VERL_EXT_SAMPLE_STEP_OFFSET="40",
                         VERL_EXT_SAMPLES_PER_STEP="512", VERL_EXT_SAMPLE_TEXT_CHARS="500")
    forwarded = {arg.split("=", 1)[0].rsplit(".", 1)[-1]: arg.split("=", 1)[1].strip("'") for arg in argv
                 if arg.startswith("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_SAMPLE")}
    assert forwarded["VERL_EXT_SAMPLE_STEP_OFFSET"] == "40" and forwarded["VERL_EXT_SAMPLES_PER_STEP"] == "512"
    assert forwarded["VERL_EXT_SAMPLE_TEXT_CHARS"] == "500"


def test_a_run_starting_its_own_cluster_leaves_the_environment_alone(tmp_path):
    argv = launched_argv(tmp_path)
    assert not [arg for arg in argv if "VERL_EXT_SAMPLE" in arg]
