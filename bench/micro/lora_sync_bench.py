"""Time the actor's side of the per-step LoRA weight sync the way verl 0.9.1's FSDP2 engine does it.

With ``ROLLOUT_LORA_MERGE=1`` (``model.lora.merge``) verl's ``FSDPEngine._merged_lora_per_tensor_param`` copies the
base weights to the CPU (``backup_base_model_weights``), merges the adapter into them layer by layer
(``fsdp_merge_unmerge``), streams every weight as a full bf16 tensor and copies the base weights back from the CPU
(``restore_base_model_weights``). This bench times the whole generator and each of those phases on one rank,
without Ray or vLLM (the receiving side is not here), and the adapter-only export of ``ROLLOUT_LORA_MERGE=0``
(``collect_lora_params``). Variants of the backup show what its CPU round trip costs: into pinned host memory,
and kept on the GPU; then the whole generator again with ``verl_ext.patches.lora_backup`` (the scripts' default), and
last with ``verl_ext.patches.lora_merged_sync`` (``LORA_MERGE_SYNC=out_of_place``: merged out of place, no backup).

    torchrun --nproc-per-node 1 bench/micro/lora_sync_bench.py --model /tmp/qwen2.5-0.5b-random --out lora_sync.json
    python bench/micro/lora_sync_bench.py --model /path --device cpu --iters 1     # logic check on CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import types
from typing import Callable

import torch
import torch.distributed as dist

from actor_update_bench import build_model  # bench/ is on sys.path when run as a script
from verl_ext.patches.lora_base_weights import base_weights


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device, iters: int) -> dict[str, float | list[float]]:
    """Median seconds of ``fn`` over ``iters`` runs after one warm-up (device work included)."""
    fn()
    _sync(device)
    runs = []
    for _ in range(iters):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        runs.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(runs), 4), "runs_s": [round(r, 4) for r in runs]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (also read by tests/test_speed_session.py for a plan's `bench lora_sync_bench` line)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model dir (e.g. verl_ext.tiny_model output)")
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", help="JSON file for the results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    from verl.utils.fsdp_utils import (
        _clean_merged_lora_,
        backup_base_model_weights,
        collect_lora_params,
        fsdp_merge_unmerge,
        normalize_peft_param_name,
        restore_base_model_weights,
    )
    from verl.utils.model import convert_weight_keys
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    else:
        transformer_impl.get_device_id = lambda: "cpu"  # verl asks CUDA for its device index
        transformer_impl.log_gpu_memory_usage = lambda *a, **k: None  # and for its memory
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    model = build_model(args.model, "fp32", "sdpa", True, True, args.lora_rank, device)
    engine = types.SimpleNamespace(module=model, _is_offload_param=False)
    base = base_weights(model)  # (name, this rank's shard): what backup_base_model_weights copies
    base_bytes = sum(shard.numel() * shard.element_size() for _, shard in base)

    def whole() -> int:
        return sum(t.numel() for _, t in FSDPEngine._merged_lora_per_tensor_param(engine))

    def export() -> int:
        params = normalize_peft_param_name(model.state_dict())
        params = convert_weight_keys(params, model)
        return sum(p.full_tensor().to(torch.bfloat16).numel() if hasattr(p, "full_tensor") else p.numel()
                   for p in params.values())

    backup = backup_base_model_weights(model)
    pinned = {name: torch.empty_like(shard, device="cpu").pin_memory() if device.type == "cuda"
              else torch.empty_like(shard) for name, shard in base}  # fmt: skip
    on_device = {name: torch.empty_like(shard) for name, shard in base}

    def copy_into(buffers: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, shard in base_weights(model):  # looked up again: verl's merge and restore ran in between
                buffers[name].copy_(shard, non_blocking=True)

    def copy_from(buffers: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, shard in base_weights(model):
                shard.copy_(buffers[name], non_blocking=True)

    results: dict[str, dict] = {}
    results["merged_sync_whole"] = timed(whole, device, args.iters)  # verl's generator, consumed
    results["backup_to_cpu"] = timed(lambda: backup_base_model_weights(model), device, args.iters)
    results["merge"] = timed(lambda: (fsdp_merge_unmerge(model, do_merge=True),
                                      restore_base_model_weights(model, backup), _clean_merged_lora_(model)),
                             device, args.iters)  # merge + the restore that undoes it (timed alone below)
    results["restore_from_cpu"] = timed(lambda: restore_base_model_weights(model, backup), device, args.iters)
    results["export_full_bf16"] = timed(export, device, args.iters)
    results["backup_pinned"] = timed(lambda: copy_into(pinned), device, args.iters)
    results["restore_pinned"] = timed(lambda: copy_from(pinned), device, args.iters)
    results["backup_on_device"] = timed(lambda: copy_into(on_device), device, args.iters)
    results["restore_on_device"] = timed(lambda: copy_from(on_device), device, args.iters)
    results["adapter_only_export"] = timed(
        lambda: sum(t.numel() for t in collect_lora_params(model, layered_summon=False, base_sync_done=True).values()),
        device, args.iters)  # fmt: skip
    import verl_ext.patches.lora_backup  # noqa: F401  (LORA_MERGE_BACKUP=pinned: reused page-locked buffers)

    results["merged_sync_whole_lora_backup"] = timed(whole, device, args.iters)
    import verl_ext.patches.lora_merged_sync  # noqa: F401  (LORA_MERGE_SYNC=out_of_place: no backup, the module only read)

    results["merged_sync_whole_out_of_place"] = timed(whole, device, args.iters)
    summary = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": args.model,
        "lora_rank": args.lora_rank,
        "base_weight_bytes": base_bytes,
        "results": results,
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
