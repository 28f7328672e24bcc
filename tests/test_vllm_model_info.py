"""ROLLOUT_MODEL_INFO=warm (verl_ext/launch/vllm_model_info.py): vLLM's model-info cache is filled in the background
while the run starts.

vLLM does not install on this CPU machine. The end-to-end tests put a stand-in ``vllm.model_executor.models.registry``
on the path with the one name the warm-up calls (``ModelRegistry._try_inspect_model_cls``) and what vLLM 0.24's
does with it: answer a known architecture and write ``$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json``, answer
None for an unknown one. The processes, the train script's wiring and the real absence of vLLM are real; the
effect on vLLM's own start-up is measured on the GPU (docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from verl_ext.launch import ppo_main, vllm_model_info

from test_train_scripts import REPO, dry_run
from stand_ins import write_stand_in

REGISTRY_STAND_IN = '''
"""Stand-in for vllm/model_executor/models/registry.py (vLLM 0.24): _try_inspect_model_cls and its cache file."""
import json, os, time
from pathlib import Path

KNOWN = {"Qwen2ForCausalLM": ("vllm.model_executor.models.qwen2", "Qwen2ForCausalLM")}


class _ModelRegistry:
    def _try_inspect_model_cls(self, model_arch):
        if model_arch not in KNOWN:
            return None
        module_name, class_name = KNOWN[model_arch]
        cache = Path(os.environ["VLLM_CACHE_ROOT"]) / "modelinfos"
        cache.mkdir(parents=True, exist_ok=True)
        time.sleep(float(os.environ.get("STAND_IN_INSPECT_S", "0")))  # vLLM's fresh interpreter, when not cached
        name = f"{module_name}-{class_name}".replace(".", "-") + ".json"
        (cache / name).write_text(json.dumps({"hash": "h", "modelinfo": {"architecture": model_arch}}))
        return {"architecture": model_arch}


ModelRegistry = _ModelRegistry()
'''
CACHE_FILE = "vllm-model_executor-models-qwen2-Qwen2ForCausalLM.json"


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A checkpoint folder naming Qwen2ForCausalLM, the stand-in registry on PYTHONPATH and an empty vLLM cache."""
    write_stand_in(tmp_path / "stand_in", "vllm.model_executor.models.registry", REGISTRY_STAND_IN)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM", "NotInVllm"]}))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'stand_in'}{os.pathsep}{REPO}")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm_cache"))
    return model, tmp_path / "vllm_cache" / "modelinfos" / CACHE_FILE


def test_the_background_warm_up_fills_vllms_cache_for_the_runs_model(stand_in, capfd):
    model, cache_file = stand_in
    process = vllm_model_info.start_in_background(
        ["algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm"])
    assert process is not None and process.wait(timeout=120) == 0
    assert json.loads(cache_file.read_text())["modelinfo"] == {"architecture": "Qwen2ForCausalLM"}
    line = [text for text in capfd.readouterr().err.splitlines() if text.startswith(vllm_model_info.MARK)]
    assert len(line) == 1 and "Qwen2ForCausalLM: cached (" in line[0], line
    assert "NotInVllm: not a vLLM architecture" in line[0]


def test_the_driver_starts_it_first_and_ends_it_when_the_checks_fail(stand_in, monkeypatch):
    model, cache_file = stand_in
    monkeypatch.setenv("STAND_IN_INSPECT_S", "60")  # still inspecting when the pre-flight fails
    started = []
    real_start = vllm_model_info.start_in_background
    monkeypatch.setattr(vllm_model_info, "start_in_background",
                        lambda overrides: started.append(real_start(overrides)) or started[-1])
    monkeypatch.setattr(ppo_main.preflight, "main", lambda argv: 2)  # a failing check
    began = time.monotonic()
    status = ppo_main.main(["--vllm-model-info", "warm", f"actor_rollout_ref.model.path={model}"],
                           run_verl=lambda *args: pytest.fail("verl must not start"))
    assert status == 2 and len(started) == 1 and started[0].returncode is not None  # ended, not left running
    assert time.monotonic() - began < 30 and not cache_file.exists()


def test_the_driver_hands_verl_the_overrides_without_its_option(stand_in, monkeypatch):
    model, cache_file = stand_in
    handed = []

    def run_verl(task_runner: str, transfer_queue_start: str) -> None:
        deadline = time.monotonic() + 120  # verl starts at once; the cache appears while it would be starting
        while not cache_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        handed.append((sys.argv[1:], cache_file.exists()))

    overrides = [f"actor_rollout_ref.model.path={model}", "trainer.total_training_steps=1"]
    assert ppo_main.main(["--no-preflight", "--vllm-model-info", "warm", *overrides], run_verl=run_verl) == 0
    assert handed == [(overrides, True)]


@pytest.mark.parametrize("overrides", [
    ["actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.model.path=/m"],  # not vLLM
    ["actor_rollout_ref.rollout.name=vllm"],  # no model path given
])
def test_nothing_starts_without_a_vllm_rollout_and_a_model(overrides):
    assert vllm_model_info.start_in_background(overrides) is None


def test_overrides_are_read_like_hydras_last_one_wins():
    given = ["actor_rollout_ref.model.path=/a", "++actor_rollout_ref.model.path='/b'", "other=1"]
    assert vllm_model_info.override_value(given, "actor_rollout_ref.model.path") == "/b"
    assert vllm_model_info.override_value(given, "actor_rollout_ref.rollout.name") is None


def test_architectures_come_from_the_checkpoints_config_and_bad_ones_give_none(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM", 3]}))
    assert vllm_model_info.architectures(str(tmp_path)) == ["Qwen2ForCausalLM"]
    (tmp_path / "config.json").write_text("{not json")
    assert vllm_model_info.architectures(str(tmp_path)) == []
    assert vllm_model_info.architectures(str(tmp_path / "missing")) == []
    assert vllm_model_info.architectures("nobody/not-in-the-hf-cache") == []


def test_a_failed_warm_up_reports_and_exits_0(tmp_path):
    # on this machine vLLM is not installed: the warm-up must say so and never fail the run
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "verl_ext.launch.vllm_model_info", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert done.returncode == 0
    assert f"{vllm_model_info.MARK}: not warmed: ModuleNotFoundError" in done.stderr
    empty = subprocess.run([sys.executable, "-m", "verl_ext.launch.vllm_model_info", str(tmp_path / "none")],
                           capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert empty.returncode == 0 and "no config.json with architectures; nothing to warm" in empty.stderr
    usage = subprocess.run([sys.executable, "-m", "verl_ext.launch.vllm_model_info"], capture_output=True, text=True,
                           cwd=REPO, timeout=120, env=env)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_train_scripts_warm_for_vllm_by_default_and_refuse_other_values():
    assert dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke")[3:9][-2:] == ["--vllm-model-info", "warm"]
    assert "--vllm-model-info" not in dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", ROLLOUT_MODEL_INFO="off")
    assert "--vllm-model-info" not in dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", ROLLOUT_BACKEND="sglang")
    bad = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**os.environ, "ROLLOUT_MODEL_INFO": "yes"})
    assert bad.returncode == 2 and "ROLLOUT_MODEL_INFO must be one of: warm off; got 'yes'" in bad.stderr
