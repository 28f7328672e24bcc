"""LOGGERS is checked before Ray starts: a logger $PYTHON cannot import is dropped (saying so) or, strict, stops.

The venv has wandb and tensorboard but not mlflow or swanlab, which stand in for the wheelhouse's missing wandb.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from test_train_scripts import dry_run, overrides_of
from verl_ext.launch import loggers
from verl_ext.launch.preflight import check_ppo, compose, main as preflight_main

REPO = Path(__file__).resolve().parents[1]
VENV = {"PYTHON": sys.executable}


def logger_of(script: str, **env: str) -> list[str]:
    """``trainer.logger`` of the composed command of ``script`` (smoke profile) run with ``env``."""
    argv = dry_run(script, RUN_PROFILE="smoke", MODEL_PATH="/models/qwen", **VENV, **env)
    config = "sft_trainer_engine" if script == "sft.sh" else "ppo_trainer"
    return list(compose(config, overrides_of(argv)).trainer.logger)


def run_script(script: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LOGGER", "RUN_PROFILE"))}
    environ.update(VENV, RUN_PROFILE="smoke", MODEL_PATH="/models/qwen", **env)
    return subprocess.run(["bash", str(REPO / "train/scripts" / script), "--dry-run"], capture_output=True,
                          text=True, env=environ, cwd=REPO)


@pytest.mark.parametrize("script", ["openspiel-ppo.sh", "logic-grpo.sh", "sft.sh"])
def test_importable_loggers_are_kept(script):
    assert logger_of(script) == ["console", "file", "wandb"]  # the default, wandb installed in the venv


@pytest.mark.parametrize("script", ["openspiel-ppo.sh", "sft.sh"])
def test_a_missing_logger_is_dropped_with_one_line_saying_why(script):
    result = run_script(script, LOGGERS="[console,file,mlflow]")
    assert result.returncode == 0
    assert "trainer.logger=\\[console\\,file\\]" in result.stdout  # the command reflects the fallback
    lines = [line for line in result.stderr.splitlines() if "mlflow" in line]
    assert len(lines) == 1
    assert "dropped the 'mlflow' logger, logging to [console,file]" in lines[0]
    assert "No module named 'mlflow'" in lines[0] and "pip install mlflow" in lines[0]
    assert "LOGGERS=[console,file]" in lines[0] and "LOGGER_CHECK=strict" in lines[0]
    assert logger_of(script, LOGGERS="[console,file,mlflow]") == ["console", "file"]


def test_nothing_left_falls_back_to_console_and_file():
    assert logger_of("openspiel-ppo.sh", LOGGERS="[swanlab]") == ["console", "file"]
    assert logger_of("openspiel-ppo.sh", LOGGERS="[wandb,mlflow]") == ["wandb"]


def test_strict_stops_before_the_command_naming_loggers_and_the_module():
    result = run_script("openspiel-ppo.sh", LOGGERS="[console,file,mlflow]", LOGGER_CHECK="strict")
    assert result.returncode == 2 and result.stdout == ""  # no command composed
    assert "LOGGERS=[console,file,mlflow] names the 'mlflow' logger" in result.stderr
    assert "cannot import 'mlflow'" in result.stderr and "LOGGERS=[console,file]" in result.stderr


def test_off_leaves_loggers_alone_and_bad_modes_are_refused():
    assert logger_of("openspiel-ppo.sh", LOGGERS="[console,mlflow]", LOGGER_CHECK="off") == ["console", "mlflow"]
    result = run_script("openspiel-ppo.sh", LOGGER_CHECK="loose")
    assert result.returncode == 2 and "LOGGER_CHECK must be one of: fallback strict off; got 'loose'" in result.stderr


def test_an_unknown_logger_is_refused_in_every_checking_mode():
    for mode in ("fallback", "strict"):
        result = run_script("logic-grpo.sh", LOGGERS="[console,wandbb]", LOGGER_CHECK=mode)
        assert result.returncode == 2
        assert "LOGGERS=[console,wandbb]: verl 0.9.1 knows no logger 'wandbb'" in result.stderr


def test_a_missing_interpreter_is_left_to_the_interpreter_check():
    result = run_script("openspiel-ppo.sh", PYTHON="/no/such/python")
    assert result.returncode == 0 and "trainer.logger=\\[console\\,file\\,wandb\\]" in result.stdout


def test_every_verl_backend_has_a_module_entry():
    from verl.utils.tracking import Tracking

    assert set(Tracking.supported_backend) | {"tracking"} == set(loggers.LOGGER_MODULES)


def test_parse_accepts_hydra_and_plain_forms():
    assert loggers.parse_loggers("[console, 'file',\"wandb\"]") == ["console", "file", "wandb"]
    assert loggers.parse_loggers("console") == ["console"]
    assert loggers.parse_loggers("[]") == []


def test_import_mode_catches_a_package_that_fails_to_import(tmp_path, monkeypatch):
    (tmp_path / "mlflow").mkdir()
    (tmp_path / "mlflow" / "__init__.py").write_text("raise ImportError('protobuf clash')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)
    assert loggers.resolve(["console", "mlflow"], "fallback", do_import=False) == (["console", "mlflow"], [])
    kept, notes = loggers.resolve(["console", "mlflow"], "fallback", do_import=True)
    assert kept == ["console"] and "ImportError: protobuf clash" in notes[0]


def test_preflight_catches_a_logger_from_a_hydra_override():
    argv = dry_run("openspiel-ppo.sh", "trainer.logger=[console,swanlab]", RUN_PROFILE="smoke", **VENV)
    cfg = compose("ppo_trainer", overrides_of(argv))
    problems = [p for p in check_ppo(cfg, check_imports=True, environ={}) if "swanlab" in p]
    assert len(problems) == 1 and "LOGGERS (trainer.logger)=[console,swanlab]" in problems[0]
    assert "cannot import 'swanlab'" in problems[0]
    assert not [p for p in check_ppo(cfg, check_imports=True, environ={"LOGGER_CHECK": "off"}) if "swanlab" in p]
    assert check_ppo(cfg, check_imports=False) == []  # the CPU-only check leaves imports to the GPU machine
    assert OmegaConf.select(cfg, "trainer.logger")[1] == "swanlab"


def test_sft_preflight_names_the_logger(tmp_path, capsys):
    argv = dry_run("sft.sh", "trainer.logger=[console,mlflow]", MODEL_PATH=str(tmp_path), **VENV)
    assert preflight_main(["--config-name", "sft_trainer_engine", "--", *overrides_of(argv)]) == 2
    assert "cannot import 'mlflow'" in capsys.readouterr().err
