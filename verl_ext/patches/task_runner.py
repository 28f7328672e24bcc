"""verl's TaskRunner in the driver process (``TASK_RUNNER=driver``) instead of a Ray actor of its own.

verl 0.9.1's ``main_ppo`` starts ``TaskRunnerV1`` as a Ray actor (main_ppo.py:90-91): a new worker process
that imports verl, torch and the trainer again before it does anything, although the driver has just imported
them to validate the config. On the lent H100 that was 14 s of a 116-125 s start-up (Ray started -> the
TaskRunner's first line, docs/runs/2026-11-25-cpu-task-runner/NOTES.md, section 0j). ``use_driver_task_runner`` replaces the actor class, where
``main_ppo`` looks it up, with a stand-in whose ``remote()`` builds the same runner here and whose
``run.remote(config)`` runs it here, in the environment Ray gives that actor: the job's ``runtime_env``
``env_vars`` and, unless ``OMP_NUM_THREADS`` is set, one OpenMP thread (ray/_private/utils.py:235-272).
Everything the runner starts (TransferQueue, FSDP workers, rollout servers, agent-loop and reward workers)
is still a Ray actor of its own, as before.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, NoReturn

DRIVER_MARK = "[verl-ext] launch: TaskRunner running in the driver process (TASK_RUNNER=driver)"


def use_driver_task_runner(main_ppo: ModuleType) -> None:
    """Make ``main_ppo.main`` (verl.trainer.main_ppo) run its TaskRunnerV1 in this process."""
    main_ppo.TaskRunnerV1 = DriverTaskRunner(main_ppo.TaskRunnerV1)


def original_class(actor_class: Any) -> type:
    """The class a ``@ray.remote`` decorator wrapped (Ray 2.60: ray/actor.py ``_modify_class``)."""
    try:
        return actor_class.__ray_metadata__.modified_class.__ray_actor_class__
    except AttributeError:
        raise TypeError(f"{actor_class!r} is not a Ray actor class: TASK_RUNNER=driver needs verl's "
                        "@ray.remote TaskRunnerV1 (verl 0.9.1); use TASK_RUNNER=actor") from None


class DriverTaskRunner:
    """Stands in for verl's TaskRunnerV1 actor class in ``run_ppo``: ``remote()`` builds the runner here."""

    def __init__(self, actor_class: Any) -> None:
        self.runner_class = original_class(actor_class)

    def remote(self) -> _DriverHandle:
        return _DriverHandle(self.runner_class())

    def options(self, **options: Any) -> NoReturn:
        # run_ppo only asks for options to profile the runner with Nsight (global_profiler.tool=nsys), which
        # needs the runner to be a Ray actor
        raise RuntimeError(f"TASK_RUNNER=driver cannot start verl's TaskRunner with Ray options {sorted(options)} "
                           "(global_profiler.tool=nsys profiles it as a Ray actor); use TASK_RUNNER=actor")


class _DriverHandle:
    def __init__(self, runner: Any) -> None:
        self.run = _DriverCall(runner.run)


class _DriverCall:
    def __init__(self, method: Any) -> None:
        self.method = method

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Run the method here; the returned object ref is what ``ray.get`` in run_ppo waits for."""
        import ray

        apply_actor_environment(ray.get_runtime_context().runtime_env)
        print(DRIVER_MARK, flush=True)
        return ray.put(self.method(*args, **kwargs))


def apply_actor_environment(runtime_env: Any) -> None:
    """What a Ray worker of this job would have: its ``env_vars``, the modules its ``import verl`` loads from
    ``VERL_USE_EXTERNAL_MODULES`` (verl/__init__.py) and, if unset, ``OMP_NUM_THREADS=1``."""
    env_vars = dict((runtime_env or {}).get("env_vars") or {})
    os.environ.update({str(key): str(value) for key, value in env_vars.items()})
    modules = str(env_vars.get("VERL_USE_EXTERNAL_MODULES") or "")
    if modules:  # this process imported verl before the variable was set
        from verl.utils.import_utils import import_external_libs

        import_external_libs(modules.split(","))
        from verl_ext.patches.registry import apply_pending

        apply_pending()  # a named patch module imported before the variable was set installs now
    if "OMP_NUM_THREADS" not in os.environ:  # Ray's rule for an actor without num_cpus
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)
