"""ROLLOUT_WORKER_START=fork (verl_ext/patches/vllm_worker_fork.py): the engine core that vLLM spawns from verl's
server actor forks its GPU worker.

vLLM does not install on this CPU machine, so the process launch runs against a stand-in ``vllm.v1.engine.utils``
with the two names vLLM 0.24 has there and the behaviour the patch depends on: ``get_mp_context`` forces
``spawn`` the way ``_maybe_force_spawn`` does in a Ray actor (it writes the variable into ``os.environ``), and
``CoreEngineProcManager.__init__`` takes the context, then starts the engine core process, which starts its
worker with the start method its own environment names. The processes, the environment inheritance through
``spawn`` and the import of our module by the real verl (``VERL_USE_EXTERNAL_MODULES``) are real; the run on the
GPU with vLLM itself is in docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

from verl_ext.patches import vllm_worker_fork
from verl_ext.launch.preflight import compose

from test_train_scripts import REPO, dry_run, overrides_of
from stand_ins import write_stand_in

STAND_IN = '''
"""Stand-in for vllm/v1/engine/utils.py (vLLM 0.24): the names and start-up order the patch relies on."""
import json, multiprocessing, os

FORCE_SPAWN = os.environ.get("STAND_IN_RAY_ACTOR") == "1"  # the launching process plays verl's server actor


def get_mp_context():
    if FORCE_SPAWN and os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") != "spawn":
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # what _maybe_force_spawn does in a Ray actor
    return multiprocessing.get_context(os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork"))


ENGINE_CORE_STATE = "not started"  # set in the engine core process; a forked worker inherits it, a spawned one not


def _worker(path):
    with open(path, "w") as f:
        json.dump({"worker_inherited_engine_core": ENGINE_CORE_STATE == "started"}, f)


def engine_core(report):
    # the engine core: no Ray actor here, so its own context follows the environment it was started with
    global ENGINE_CORE_STATE
    ENGINE_CORE_STATE = "started"
    method = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    context = multiprocessing.get_context(method)
    worker = context.Process(target=_worker, args=(report + ".worker",))
    worker.start()
    worker.join()
    with open(report, "w") as f:
        json.dump({"engine_core_saw": method, "worker_exit": worker.exitcode}, f)


class CoreEngineProcManager:
    def __init__(self, report):
        context = get_mp_context()
        self.start_method = context.get_start_method()
        process = context.Process(target=engine_core, args=(report,))
        process.start()
        process.join()
'''

LAUNCH = '''
import json, os, sys
import verl  # imports the modules in VERL_USE_EXTERNAL_MODULES, as in every Ray worker of the job
import vllm.v1.engine.utils as engine_utils

report = sys.argv[1]
before = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
manager = engine_utils.CoreEngineProcManager(report)
result = json.load(open(report))
result.update(json.load(open(report + ".worker")))
result.update(launcher_start_method=manager.start_method, launcher_env_after=os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"),
              patched=getattr(engine_utils, sys.argv[2], False),
              hook_left=any(type(f).__name__ == "_PatchAfterImport" for f in sys.meta_path))
print(json.dumps(result))
'''


def launch(tmp_path: Path, modules: str | None, **env: str) -> tuple[dict, str]:
    """Run the stand-in launch in a fresh interpreter that plays verl's server actor; its report and output."""
    write_stand_in(tmp_path / "stand_in", "vllm.v1.engine.utils", STAND_IN)
    environ = {key: value for key, value in os.environ.items()
               if key not in ("VERL_USE_EXTERNAL_MODULES", "VLLM_WORKER_MULTIPROC_METHOD")}
    environ.update(PYTHONPATH=f"{tmp_path / 'stand_in'}{os.pathsep}{REPO}", STAND_IN_RAY_ACTOR="1", **env)
    if modules is not None:
        environ["VERL_USE_EXTERNAL_MODULES"] = modules
    done = subprocess.run([sys.executable, "-c", LAUNCH, str(tmp_path / "report.json"), vllm_worker_fork.PATCHED], capture_output=True,
                          text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


@pytest.mark.slow
def test_the_engine_core_spawned_from_the_server_actor_forks_its_worker(tmp_path):
    result, output = launch(tmp_path, "verl_ext.patches.vllm_worker_fork")
    assert result["launcher_start_method"] == "spawn"  # vLLM's forced spawn for the engine core stays
    assert result["engine_core_saw"] == "fork" and result["worker_exit"] == 0
    assert result["worker_inherited_engine_core"]  # forked: the engine core's state and modules came with it
    assert result["launcher_env_after"] == "spawn"  # the server actor's own variable is put back
    assert result["patched"] and not result["hook_left"]
    assert vllm_worker_fork.FORK_MARK in output


@pytest.mark.slow
def test_without_the_switch_vllms_spawn_reaches_the_worker(tmp_path):
    result, output = launch(tmp_path, None)
    assert result["engine_core_saw"] == "spawn" and not result["worker_inherited_engine_core"]
    assert not result["patched"] and vllm_worker_fork.FORK_MARK not in output


@pytest.mark.slow
def test_an_explicit_spawn_in_the_environment_is_left_alone(tmp_path):
    result, output = launch(tmp_path, "verl_ext.patches.vllm_worker_fork", VLLM_WORKER_MULTIPROC_METHOD="spawn")
    assert result["patched"] and result["engine_core_saw"] == "spawn"
    assert vllm_worker_fork.FORK_MARK not in output


def test_an_unknown_vllm_layout_is_reported_and_left_unpatched(capsys):
    module = type(sys)("vllm_like")
    module.get_mp_context = lambda: None
    assert vllm_worker_fork.patch_engine_launch(module) is False
    assert module.get_mp_context() is None and not hasattr(module, vllm_worker_fork.PATCHED)
    assert "has no CoreEngineProcManager/get_mp_context" in capsys.readouterr().err


def test_get_mp_context_outside_an_engine_launch_changes_nothing(monkeypatch):
    """vLLM calls get_mp_context elsewhere in that module (a tensor queue): only the engine launch is changed."""
    import multiprocessing

    module = type(sys)("vllm_like")
    module.get_mp_context = lambda: multiprocessing.get_context("spawn")
    module.CoreEngineProcManager = type("CoreEngineProcManager", (), {"__init__": lambda self: None})
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert vllm_worker_fork.patch_engine_launch(module)
    module.get_mp_context()
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert vllm_worker_fork.patch_engine_launch(module)  # a second import patches once


def test_train_script_puts_the_module_into_every_ray_workers_environment():
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", ROLLOUT_WORKER_START="fork", VERL_USE_EXTERNAL_MODULES="my.mod",
                   OLD_LOG_PROB_PASS="always", GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all",
                   SIGNAL_CHECK="off", GRPO_TIED_GROUPS="verl", MOVE_CREDIT="off")  # their modules join the list otherwise
    cfg = compose("ppo_trainer", overrides_of(argv))
    # verl's main_ppo merges its defaults with ray_kwargs.ray_init.runtime_env before ray.init (main_ppo.py:61-71)
    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    env_vars = OmegaConf.to_container(runtime_env)["env_vars"]
    assert env_vars["VERL_USE_EXTERNAL_MODULES"] == "my.mod,verl_ext.patches.vllm_worker_fork"
    assert env_vars["VLLM_DISABLE_COMPILE_CACHE"] == "1"  # verl's own defaults stay
    default = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", OLD_LOG_PROB_PASS="always", GC_FREEZE="0", ACTOR_FSDP="on",
                      LM_HEAD_POSITIONS="all", SIGNAL_CHECK="off", GRPO_TIED_GROUPS="verl", MOVE_CREDIT="off")  # fork: vLLM's
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=verl_ext.patches.vllm_worker_fork" \
        in default
    for env in ({"ROLLOUT_WORKER_START": "spawn"}, {"ROLLOUT_BACKEND": "sglang"},
                {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}):
        assert not any("VERL_USE_EXTERNAL_MODULES" in arg for arg in dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                                             OLD_LOG_PROB_PASS="always", GC_FREEZE="0", ACTOR_FSDP="on",
                                                                             LM_HEAD_POSITIONS="all", SIGNAL_CHECK="off", GRPO_TIED_GROUPS="verl", MOVE_CREDIT="off",
                                                                             **env)), env


@pytest.mark.parametrize("env, message", [
    ({"ROLLOUT_WORKER_START": "forkserver"}, "ROLLOUT_WORKER_START must be one of: spawn fork; got 'forkserver'"),
    ({"ROLLOUT_WORKER_START": "fork", "ROLLOUT_BACKEND": "sglang"}, "applies to vLLM's engine core only"),
    ({"ROLLOUT_WORKER_START": "fork", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, "vLLM's explicit spawn wins"),
])
def test_train_script_refuses_what_cannot_work(env, message):
    done = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                          text=True, env={**os.environ, **env})
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_install_patches_an_already_imported_engine_module_and_hooks_nothing(monkeypatch):
    import multiprocessing

    module = type(sys)(vllm_worker_fork.ENGINE_UTILS)
    module.get_mp_context = lambda: multiprocessing.get_context("spawn")
    module.CoreEngineProcManager = type("CoreEngineProcManager", (), {"__init__": lambda self: None})
    monkeypatch.setitem(sys.modules, vllm_worker_fork.ENGINE_UTILS, module)
    hooks_before = list(sys.meta_path)
    vllm_worker_fork.install()
    assert getattr(module, vllm_worker_fork.PATCHED) and sys.meta_path == hooks_before
