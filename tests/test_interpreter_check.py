"""The scripts' interpreter ($PYTHON) check: a Python without verl ends in a message, not a traceback.

Each script runs for real (no --dry-run) with PYTHON pointing at an interpreter that cannot see verl: a wrapper
around this test's Python with `-S` (no site-packages), so the check runs exactly as on a machine whose python3
lacks the venv. Nothing gets as far as verl or Ray.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.launch import interpreter, preflight

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "train" / "scripts"


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture()
def bare_python(tmp_path: Path) -> Path:
    """An interpreter with the standard library only (this Python without its site-packages)."""
    return executable(tmp_path / "python-without-verl", f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')


def run_script(script: str, python: Path | str, tmp_path: Path, *args: str, **extra: str
               ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ROLLOUT_BACKEND")}
    env.update(PYTHON=str(python), RUN_PROFILE="smoke", LOG_DIR=str(tmp_path / "logs"), **extra)
    env.update(SFT_TRAIN_FILE=str(tmp_path / "train.parquet"), SFT_VAL_FILE=str(tmp_path / "val.parquet"))
    (tmp_path / "train.parquet").touch()
    (tmp_path / "val.parquet").touch()
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=60)  # fmt: skip


@pytest.mark.parametrize(("script", "missing"), [
    ("openspiel-ppo.sh", "verl, vllm (for ROLLOUT_BACKEND=vllm)"),
    ("logic-grpo.sh", "verl, vllm (for ROLLOUT_BACKEND=vllm)"),
    ("sft.sh", "verl, torch"),
    ("merge-ppo.sh", "torch, transformers"),
])  # fmt: skip
def test_a_python_without_verl_gets_a_message_not_a_traceback(script, missing, bare_python, tmp_path):
    result = run_script(script, bare_python, tmp_path, "checkpoints/x")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "logs").exists()
    err = result.stderr
    assert f"pre-flight: the scripts' Python interpreter cannot import {missing}." in err
    version = ".".join(map(str, sys.version_info[:3]))
    assert f"interpreter: {sys.executable} (Python {version}; PYTHON={bare_python})" in err
    assert f"PYTHON=/path/to/venv/bin/python bash {SCRIPTS / script}" in err
    assert "source /path/to/venv/bin/activate" in err
    install = 'pip install -e .' if script == "merge-ppo.sh" else '-e ".[vllm]"'
    assert install in err


def test_the_missing_backend_is_named_with_its_variable(bare_python, tmp_path):
    result = run_script("openspiel-ppo.sh", bare_python, tmp_path, ROLLOUT_BACKEND="sglang")
    assert result.returncode == 2
    assert "cannot import verl, sglang (for ROLLOUT_BACKEND=sglang)." in result.stderr
    assert '-e ".[sglang]"' in result.stderr and "[tool.uv] override" in result.stderr


def test_a_python_that_is_not_there(tmp_path):
    result = run_script("openspiel-ppo.sh", tmp_path / "no" / "python", tmp_path)
    assert result.returncode == 2
    assert f"pre-flight: PYTHON={tmp_path / 'no' / 'python'}: no such interpreter" in result.stderr


def test_a_python_too_old_to_run_the_check(tmp_path):
    old = executable(tmp_path / "python2", '#!/bin/sh\nif [ "$1" = --version ]; then echo "Python 2.7.18" >&2; '
                                           'exit 0; fi\necho "SyntaxError: invalid syntax" >&2\nexit 1\n')
    result = run_script("merge-ppo.sh", old, tmp_path)
    assert result.returncode == 2
    assert f"pre-flight: PYTHON={old} ({old}, Python 2.7.18) could not run the interpreter check (exit 1)" in (
        result.stderr.replace("\n", " ")
    )
    assert "verl-ext needs Python 3.10-3.12" in result.stderr


def test_check_looks_where_python_dash_m_would(tmp_path):
    """`$PYTHON -m module` finds packages in the current directory; the check (run by file path) must too."""
    (tmp_path / "here" / "probe_pkg_xyz").mkdir(parents=True)
    (tmp_path / "here" / "probe_pkg_xyz" / "__init__.py").touch()
    (tmp_path / "elsewhere").mkdir()
    command = [sys.executable, "-S", str(REPO / "verl_ext" / "launch" / "interpreter.py"), "json", "probe_pkg_xyz"]
    found = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path / "here")
    assert found.returncode == 0 and found.stderr == ""
    lost = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path / "elsewhere")
    assert lost.returncode == 2
    assert "cannot import probe_pkg_xyz." in lost.stderr and "PYTHON=python3 resolved on PATH" in lost.stderr


def test_missing_modules_and_settings_are_named():
    assert interpreter.missing_modules(["json", "no_such_module_xyz", "no_such_module_xyz.sub"]) == [
        "no_such_module_xyz", "no_such_module_xyz.sub"]
    lines = interpreter.check(["json", "no_such_module_xyz=ROLLOUT_BACKEND=x"], "/opt/py", "bash s.sh", "", "")
    assert lines[0] == ("pre-flight: the scripts' Python interpreter cannot import no_such_module_xyz "
                        "(for ROLLOUT_BACKEND=x).")
    assert lines[1].endswith("; PYTHON=/opt/py)")
    assert interpreter.check(["json"], "python3", "bash s.sh", "", "") == []


def test_a_venv_in_the_checkout_is_suggested(tmp_path):
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.touch()
    lines = interpreter.advice("python3", "bash train/scripts/sft.sh", "vllm", str(tmp_path))
    assert f"  PYTHON={venv_python} bash train/scripts/sft.sh   (a venv in this checkout)" in lines


def test_preflight_names_an_import_failure_inside_verl(monkeypatch, capsys):
    def broken(config_name, overrides):
        raise ModuleNotFoundError("No module named 'torch'")

    monkeypatch.setattr(preflight, "compose", broken)
    assert preflight.main(["--no-import-check", "--", "trainer.nnodes=1"]) == 2
    err = capsys.readouterr().err
    assert f"pre-flight: {sys.executable} (Python " in err
    assert "found verl but an import failed: ModuleNotFoundError: No module named 'torch'" in err
    assert "PYTHON=/path/to/venv/bin/python" in err
