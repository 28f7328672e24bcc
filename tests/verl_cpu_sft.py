"""Run verl 0.9.1's own SFT trainer (``verl.trainer.sft_trainer``) on CPU, for the tests only.

verl knows CUDA/NPU/ROCm platforms but no CPU one: its process group asks for NCCL and its engine registry
has no CPU entry. This entry point registers a CPU platform (gloo, no device calls), selects the FSDP engine
registered for CUDA (``VERL_ENGINE_DEVICE``), and then calls verl's unmodified Hydra ``main``, so the
trainer, dataset, loss, FSDP2 wrapping and checkpointing that run on a GPU run here on a tiny model.

    python -m torch.distributed.run --standalone --nproc_per_node 1 tests/verl_cpu_sft.py <overrides>
"""

from __future__ import annotations

import functools
import os
import sys
import types

import torch
import torch.distributed

# Must be set before verl's engine registry is asked for an engine.
os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")

from verl.plugin.platform.platform_cuda import PlatformCUDA  # noqa: E402
from verl.plugin.platform.platform_manager import set_platform  # noqa: E402


def _noop(*_args: object, **_kwargs: object) -> None:
    return None


def _zero(*_args: object, **_kwargs: object) -> int:
    return 0


class PlatformCPU(PlatformCUDA):
    """verl's CUDA platform with every device call answered for the CPU."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @functools.cached_property
    def device_module(self) -> types.ModuleType:
        module = types.ModuleType("verl_cpu_device")
        for name in ("set_device", "empty_cache", "synchronize", "manual_seed", "manual_seed_all",
                     "reset_peak_memory_stats"):
            setattr(module, name, _noop)
        for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved",
                     "current_device"):
            setattr(module, name, _zero)
        module.is_available = lambda: True
        module.device_count = lambda: 1
        module.mem_get_info = lambda *_a, **_k: (0, 0)
        module.get_device_name = lambda *_a, **_k: "cpu"
        module.get_device_properties = _noop
        return module

    def is_available(self) -> bool:
        return True

    def current_device(self) -> torch.device:  # verl moves modules with .to(device=current_device())
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def empty_cache(self) -> None:
        return None

    def communication_backend_name(self) -> str:
        return "gloo"


def _init_gloo(timeout_second: int = 36000) -> tuple[int, int, int]:
    """verl asks for "cpu:gloo,<device>:<backend>", which is a duplicate entry when the device is the CPU."""
    torch.distributed.init_process_group(backend="gloo")
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def main() -> None:
    set_platform(PlatformCPU())
    import verl.utils.distributed

    verl.utils.distributed.initialize_global_process_group = _init_gloo
    from verl.trainer.sft_trainer import main as verl_sft_main

    sys.argv = [sys.argv[0], *sys.argv[1:], "trainer.device=cpu"]
    verl_sft_main()


if __name__ == "__main__":
    main()
