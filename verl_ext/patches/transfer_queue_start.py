"""Start TransferQueue while the trainer starts its workers (``TRANSFER_QUEUE_START=overlap``).

verl 0.9.1's ``TaskRunnerV1.run`` (main_ppo.py:131-162) starts TransferQueue first (``tq.init``: its controller,
then its storage actors, each a new Ray worker process that imports torch) and only then builds the trainer,
whose ``init()`` starts the FSDP workers, the reward workers and the vLLM server (more new processes). On the lent
GPU machines that first phase took 18.5-20.9 s of a 137-149 s start-up (docs/runs/speed-lab-notes/0l-smoke-load-two-machines.md, section 0l) with nothing else
running. The sync trainer touches TransferQueue only from its agent-loop workers and ``fit()`` on (its
``_load_checkpoint`` restores TransferQueue state only in the async modes, trainer_base.py:900-907; verl's workers
connect lazily, utils/transferqueue_utils.py:378-383), so ``OverlappedTaskRunner.run`` starts TransferQueue in a
thread, builds and initialises the trainer meanwhile, and waits for TransferQueue before the agent-loop manager.
Other trainer modes run verl's own ``run`` unchanged. The objects built, their configuration and the training are
the same as verl's; only the order of two independent start-ups changes. Measured on one H100 (docs/runs/speed-lab-notes/0l-smoke-load-two-machines.md, section 0l):
TransferQueue's 19-21 s were hidden behind the FSDP worker's start, but later vLLM phases grew and the start-up
shrank by only 3 s in the clean pair. Together with the other start-up levers it won every pair (docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m),
so the train scripts default to ``overlap``; ``serial`` is verl's order.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from pprint import pprint
from types import ModuleType
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf
from verl.trainer import main_ppo as _main_ppo

from .task_runner import original_class

OVERLAP_MARK = "[verl-ext] launch: TransferQueue starting beside the trainer (TRANSFER_QUEUE_START=overlap)"
READY_MARK = "[verl-ext] launch: TransferQueue ready"
SERIAL_MARK = "[verl-ext] launch: TRANSFER_QUEUE_START=overlap applies to trainer.v1.trainer_mode=sync only"


_VerlTaskRunner = original_class(_main_ppo.TaskRunnerV1)


def use_overlapped_transfer_queue(main_ppo: ModuleType) -> None:
    """Make ``main_ppo.main`` (verl.trainer.main_ppo) start its runner as ``OverlappedTaskRunner``."""
    if original_class(main_ppo.TaskRunnerV1) is not _VerlTaskRunner:
        raise TypeError(f"TRANSFER_QUEUE_START=overlap replaces verl 0.9.1's TaskRunnerV1, found "
                        f"{main_ppo.TaskRunnerV1!r}; use TRANSFER_QUEUE_START=serial")
    main_ppo.TaskRunnerV1 = ray.remote(OverlappedTaskRunner)


class OverlappedTaskRunner(_VerlTaskRunner):  # type: ignore[misc, valid-type]
    """verl's TaskRunnerV1 whose ``run`` starts TransferQueue in a thread beside the trainer's ``init()``."""

    def run(self, config: DictConfig) -> None:
        """verl's ``TaskRunnerV1.run`` with ``tq.init`` moved beside ``trainer.init()`` (sync trainer only)."""
        import transfer_queue as tq

        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.utils.logging_utils import configure_verl_logging

        if config.trainer.v1.trainer_mode != "sync":
            print(f"{SERIAL_MARK}, not {config.trainer.v1.trainer_mode}: TransferQueue starts first", flush=True)
            return super().run(config)
        configure_verl_logging()
        trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
        config.transfer_queue.enable = True
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        self.config = config

        print(OVERLAP_MARK, flush=True)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="transfer-queue-start") as pool:
            started = pool.submit(_start_transfer_queue, tq, config.transfer_queue)
            succeeded = False
            try:
                self.trainer = trainer_cls(config=config)
                self.trainer.init()
                started.result()  # the agent-loop workers and fit() are TransferQueue's first users
                self.init_agent_loop_manager()
                self.trainer.fit(self.agent_loop_manager)
                succeeded = True
            finally:
                try:
                    tracking = getattr(self.trainer, "logger", None)
                    if tracking is not None:
                        tracking.finish(exit_code=0 if succeeded else 1)
                finally:
                    wait([started])  # never close TransferQueue halfway through its start
                    tq.close()


def _start_transfer_queue(tq: Any, conf: DictConfig) -> None:
    began = time.monotonic()
    tq.init(conf)
    print(f"{READY_MARK} after {time.monotonic() - began:.1f} s", flush=True)
