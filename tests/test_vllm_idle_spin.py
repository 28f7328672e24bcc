"""ROLLOUT_IDLE_SPIN_S (verl_ext/patches/vllm_idle_spin.py): vLLM's queue readers busy-loop for the set seconds.

vLLM does not install on this CPU machine: the patch runs against a stand-in
``vllm.distributed.device_communicators.shm_broadcast`` whose ``SpinCondition`` keeps what vLLM 0.24's does and the
patch depends on (``is_reader``, ``busy_loop_s`` read in ``wait``: spin within it after the last read, else wait for a
notification). The import through the real verl (``VERL_USE_EXTERNAL_MODULES``) and the train scripts' wiring are
real; the effect on a GPU run is not measured yet (docs/runs/speed-lab-notes/6-next-gpu-session.md, section 6).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from omegaconf import OmegaConf

from verl_ext.patches import vllm_idle_spin
from verl_ext.launch.preflight import compose

from test_train_scripts import REPO, dry_run, overrides_of
from stand_ins import write_stand_in

SHM_STAND_IN = '''
"""Stand-in for vllm/distributed/device_communicators/shm_broadcast.py (vLLM 0.24): SpinCondition's wait."""
import time


class SpinCondition:
    def __init__(self, is_reader, busy_loop_s=1):
        self.is_reader = is_reader
        self.last_read = time.monotonic()
        self.busy_loop_s = busy_loop_s if is_reader else 0

    def record_read(self):
        self.last_read = time.monotonic()

    def wait(self, timeout_ms=None):
        if time.monotonic() <= self.last_read + self.busy_loop_s:
            return "spin"  # vLLM: sched_yield(), then the caller looks at the buffer again
        return "sleep"  # vLLM: poll the notification socket for up to timeout_ms
'''

CHILD = '''
import json, time
import verl  # imports VERL_USE_EXTERNAL_MODULES, as in vLLM's server actor, engine core and GPU worker
from vllm.distributed.device_communicators import shm_broadcast

reader, writer = shm_broadcast.SpinCondition(True), shm_broadcast.SpinCondition(False)
reader.record_read()
time.sleep(0.2)
print(json.dumps({"reader": reader.wait(timeout_ms=5), "busy_loop_s": reader.busy_loop_s,
                  "writer_busy_loop_s": writer.busy_loop_s, "name": shm_broadcast.SpinCondition.wait.__name__}))
'''


def run_child(tmp_path, **env: str) -> subprocess.CompletedProcess:
    write_stand_in(tmp_path / "stand_in", vllm_idle_spin.SHM_MODULE, SHM_STAND_IN)
    environ = {key: value for key, value in os.environ.items() if key != vllm_idle_spin.ENV}
    environ.update(PYTHONPATH=f"{tmp_path / 'stand_in'}{os.pathsep}{REPO}",
                   VERL_USE_EXTERNAL_MODULES="verl_ext.patches.vllm_idle_spin", **env)
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=environ, timeout=300)


def test_readers_sleep_after_the_set_seconds_instead_of_vllms_one(tmp_path):
    done = run_child(tmp_path, VERL_EXT_VLLM_IDLE_SPIN_S="0.05")
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"reader": "sleep", "busy_loop_s": 0.05, "writer_busy_loop_s": 0, "name": "wait"}
    assert f"{vllm_idle_spin.MARK}: readers busy-loop 0.05 s after a read (vLLM's: 1 s)" in done.stderr


def test_without_the_variable_vllms_spin_is_kept(tmp_path):
    done = run_child(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["reader"] == "spin"  # 0.2 s after a read, within 1 s
    assert vllm_idle_spin.MARK not in done.stderr


@pytest.mark.parametrize("given", ["fast", "-1", "nan"])
def test_a_bad_value_is_named(given):
    with pytest.raises(ValueError, match=f"{vllm_idle_spin.ENV} must be a number of seconds >= 0, got '{given}'"):
        vllm_idle_spin.idle_spin_seconds({vllm_idle_spin.ENV: given})
    assert vllm_idle_spin.idle_spin_seconds({}) is None
    assert vllm_idle_spin.idle_spin_seconds({vllm_idle_spin.ENV: "0"}) == 0.0


def test_an_unknown_vllm_layout_is_named_and_left_alone(capsys):
    module = types.ModuleType(vllm_idle_spin.SHM_MODULE)
    assert vllm_idle_spin.patch_spin_condition(module, 0.05) is False
    assert "has no SpinCondition.wait (not vLLM 0.24?); vLLM's spin is kept" in capsys.readouterr().err


def test_train_scripts_pass_the_seconds_only_when_set_and_refuse_other_values():
    def env_vars(**env: str) -> dict:
        cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
        return OmegaConf.to_container(cfg.ray_kwargs.ray_init.get("runtime_env") or {}).get("env_vars") or {}

    set_ = env_vars(ROLLOUT_IDLE_SPIN_S="0.05")
    assert set_[vllm_idle_spin.ENV] == "0.05"  # a string, as Ray's runtime_env wants
    assert set_["VERL_USE_EXTERNAL_MODULES"].split(",")[-1] == "verl_ext.patches.vllm_idle_spin"
    unset = env_vars()
    assert vllm_idle_spin.ENV not in unset and "vllm_idle_spin" not in unset["VERL_USE_EXTERNAL_MODULES"]
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "ROLLOUT_IDLE_SPIN_S": "fast"})
    assert bad.returncode == 2 and "ROLLOUT_IDLE_SPIN_S must be a number of seconds >= 0" in bad.stderr
