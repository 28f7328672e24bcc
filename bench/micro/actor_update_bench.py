"""Time one actor micro batch (forward + backward + optimizer step) the way verl's FSDP2 engine builds it.

Isolates the update path of a GRPO step from Ray, vLLM and verl's data plumbing so that each setting can be
measured on its own: how the model is held (fp32 master weights + bf16 compute under FSDP2, or bf16 without
FSDP), padding-free packed sequences vs padded batches, attention implementation, activation checkpointing.
The model build mirrors verl 0.9.1's ``FSDPEngine`` (``from_pretrained`` in ``model_dtype``, PEFT LoRA,
``enable_input_require_grads``, non-reentrant checkpointing, ``fully_shard`` per decoder layer and the root
with ``MixedPrecisionPolicy(bf16, fp32)``).

    torchrun --nproc-per-node 1 bench/micro/actor_update_bench.py --model /path/to/model --out results.json
    python bench/micro/actor_update_bench.py --model /path --device cpu --tokens 512 --iters 1   # logic check on CPU
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist

import verl_ext.patches.attention  # noqa: F401  (registers attn_implementation="torch_varlen")

class Variant(NamedTuple):
    """How the actor is held and fed: verl's FSDP2 engine keys in brackets."""

    # fp32 master weights with bf16 compute, or bf16 (fsdp_config.model_dtype); "plain": the fp32 model as
    # ACTOR_FSDP=off holds it (verl_ext.patches.unsharded_actor: frozen weights bf16, the adapter fp32, under autocast)
    model_dtype: str
    fsdp: bool  # fully_shard per decoder layer and the root, or a plain module under autocast
    packed: bool  # one padding-free row (model.use_remove_padding) or padded rows
    attn: str  # attn_implementation
    checkpointing: bool  # model.enable_gradient_checkpointing
    reshard_after_forward: bool = True  # fsdp_config.reshard_after_forward (verl's default True)
    wrap_layers: bool = True  # fully_shard each decoder layer too, or the root alone (one FSDP unit)
    compiled: bool = False  # torch.compile each decoder layer's forward (verl_ext.patches.compiled_layers, ACTOR_COMPILE)


VARIANTS: dict[str, Variant] = {
    "verl_default": Variant("fp32", True, True, "sdpa", True),
    "padded": Variant("fp32", True, False, "sdpa", True),
    "packed_no_checkpointing": Variant("fp32", True, True, "sdpa", False),
    "padded_no_checkpointing": Variant("fp32", True, False, "sdpa", False),
    "bf16_weights_packed": Variant("bf16", True, True, "sdpa", True),
    "bf16_weights_padded": Variant("bf16", True, False, "sdpa", True),
    "no_fsdp_bf16_padded": Variant("bf16", False, False, "sdpa", True),
    # PyTorch's own varlen kernel over the packed row (verl_ext.patches.attention): padding-free without flash-attn
    "packed_varlen": Variant("fp32", True, True, "torch_varlen", True),
    "packed_varlen_no_checkpointing": Variant("fp32", True, True, "torch_varlen", False),
    # resharding after forward frees each layer's unsharded bf16 copy until backward (one GPU, 0.5B: 3.1 vs
    # 3.9 GB peak) at the cost of a second unshard (copy + cast) per layer in backward
    "packed_varlen_no_reshard": Variant("fp32", True, True, "torch_varlen", True, reshard_after_forward=False),
    "bf16_weights_packed_varlen": Variant("bf16", True, True, "torch_varlen", True),
    "no_fsdp_bf16_packed_varlen": Variant("bf16", False, True, "torch_varlen", True),
    # one FSDP unit for the whole model (verl: fsdp_config.wrap_policy.transformer_layer_cls_to_wrap naming no
    # class): no per-layer hooks, the whole bf16 copy unsharded through forward and backward
    "packed_varlen_root_only": Variant("fp32", True, True, "torch_varlen", True, wrap_layers=False),
    # verl's layout with each decoder layer compiled (ACTOR_COMPILE=layers); the warm-up steps compile
    "packed_varlen_compiled": Variant("fp32", True, True, "torch_varlen", True, compiled=True),
    "no_fsdp_bf16_packed_varlen_compiled": Variant("bf16", False, True, "torch_varlen", True, compiled=True),
    # the one-GPU actor of ACTOR_FSDP=off (the train scripts' default there): verl's numbers without FSDP units
    "unsharded_packed_varlen": Variant("plain", False, True, "torch_varlen", True),
    "unsharded_packed_varlen_compiled": Variant("plain", False, True, "torch_varlen", True, compiled=True),
}
OPTIONAL_VARIANTS: dict[str, Variant] = {
    # torch.compile of flex attention ran for minutes on the H100 before the first step: opt-in only
    "packed_flex_attention": Variant("fp32", True, True, "flex_attention", True),
}
ALL_VARIANTS = {**VARIANTS, **OPTIONAL_VARIANTS}


@dataclass
class Result:
    variant: str
    tokens: int
    sequences: int
    median_s: float
    tokens_per_s: float
    peak_memory_gb: float
    cpu_ops: int = 0  # aten ops the CPU dispatches for one step: what a CPU-bound step's time follows
    first_step_s: float = 0.0  # the first step (a warm-up step unless --warmup 0): with compiled layers, the compilation
    error: str = ""


def sequence_lengths(total_tokens: int, low: int, high: int, seed: int) -> list[int]:
    """Random lengths in [low, high] whose sum stays within ``total_tokens`` (a token-budget micro batch)."""
    rng = random.Random(seed)
    lengths: list[int] = []
    while True:
        length = rng.randint(low, high)
        if sum(lengths) + length > total_tokens:
            return lengths or [total_tokens]
        lengths.append(length)


def build_model(path: str, model_dtype: str, attn: str, checkpointing: bool, use_fsdp: bool,
                lora_rank: int, device: torch.device, reshard_after_forward: bool = True,
                wrap_layers: bool = True, compiled: bool = False) -> torch.nn.Module:
    """The actor as verl's FSDP engine builds it (see module docstring)."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if model_dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    model.config.use_cache = False
    model.train()  # Hugging Face applies activation checkpointing in training mode only
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora_rank, lora_alpha=lora_rank,
                                             target_modules="all-linear", bias="none"))
    for param in model.parameters():  # verl casts the adapter to the base dtype
        param.data = param.data.to(dtype)
    if model_dtype == "plain":
        from verl_ext.patches.unsharded_actor import unsharded

        unsharded(model, torch.bfloat16, device)  # moves it to the device too
    else:
        model.to(device)
    if use_fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                      cast_forward_inputs=True)
        layer_classes = tuple(type(m) for m in model.modules() if type(m).__name__.endswith("DecoderLayer"))
        for module in model.modules():
            if wrap_layers and isinstance(module, layer_classes):
                fully_shard(module, mp_policy=policy, reshard_after_forward=reshard_after_forward)
        fully_shard(model, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    if compiled:
        from verl_ext.patches.compiled_layers import compile_decoder_layers

        compile_decoder_layers(model)  # torch.compile's backend: $VERL_EXT_COMPILE_BACKEND, else inductor
    return model


def make_batch(lengths: list[int], packed: bool, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Packed: one row with position ids restarting per sequence (verl's padding-free path). Padded: a 2-D batch."""
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, vocab, (n,), generator=gen) for n in lengths]
    if packed:
        return {"input_ids": torch.cat(seqs).unsqueeze(0).to(device),
                "position_ids": torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0).to(device)}
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               autocast: bool) -> None:
    """Forward, token log-probs in fp32 (as verl computes them), a policy-gradient-shaped loss, backward, step."""
    with torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(**batch, use_cache=False).logits
    labels = torch.roll(batch["input_ids"], shifts=-1, dims=-1)
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    mask = batch.get("attention_mask")
    loss = -(log_probs * mask).sum() / mask.sum() if mask is not None else -log_probs.mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_variant(name: str, args: argparse.Namespace, device: torch.device) -> Result:
    variant = ALL_VARIANTS[name]
    lengths = sequence_lengths(args.tokens, args.min_len, args.max_len, args.seed)
    try:
        model = build_model(args.model, variant.model_dtype, variant.attn, variant.checkpointing, variant.fsdp,
                            args.lora_rank, device, reshard_after_forward=variant.reshard_after_forward,
                            wrap_layers=variant.wrap_layers, compiled=variant.compiled)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        batch = make_batch(lengths, variant.packed, model.config.vocab_size, device)
        autocast = not variant.fsdp  # FSDP2's policy casts; without it, autocast gives the same bf16 compute
        times, first_step = [], float("nan")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for i in range(args.warmup + args.iters):
            if args.empty_cache_between and device.type == "cuda":
                # verl's weight sync empties the actor's allocator cache between two updates
                # (engine_workers.py update_weights): the next update allocates its memory anew
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            start = time.perf_counter()
            train_step(model, optimizer, batch, autocast)
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            if i == 0:
                first_step = elapsed
            if i >= args.warmup:
                times.append(elapsed)
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        median = statistics.median(times)
        result = Result(name, sum(lengths), len(lengths), median, sum(lengths) / median, peak,
                        cpu_ops=count_cpu_ops(model, optimizer, batch, autocast), first_step_s=first_step)
        if args.profile == name:
            profile_step(model, optimizer, batch, autocast, args.profile_out)
    except Exception as exc:  # a variant that cannot run here (e.g. flex attention) is reported, not fatal
        error = f"{type(exc).__name__}: {exc}"[:500]
        result = Result(name, sum(lengths), len(lengths), float("nan"), 0.0, 0.0, error=error)
    finally:
        model = optimizer = batch = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def check_varlen(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Token log-probs of the packed micro batch under torch_varlen against the same sequences as padded rows
    under SDPA (one bf16 model, the varlen kernel on this device): the largest and mean absolute difference."""
    from transformers import AutoModelForCausalLM

    lengths = sequence_lengths(args.tokens, args.min_len, args.max_len, args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.to(device).eval()
    log_probs = {}
    with torch.no_grad():
        for packed, attn in ((False, "sdpa"), (True, "torch_varlen")):
            model.set_attn_implementation(attn)
            batch = make_batch(lengths, packed, model.config.vocab_size, device)
            logits = model(**batch, use_cache=False).logits.float()
            rows = torch.log_softmax(logits, dim=-1)
            if packed:
                log_probs[attn] = rows[0]
            else:  # the valid tokens of each padded row, in packing order
                log_probs[attn] = torch.cat([rows[i, :n] for i, n in enumerate(lengths)])
    diff = (log_probs["torch_varlen"] - log_probs["sdpa"]).abs()
    return {"tokens": sum(lengths), "max_abs_logprob_diff": diff.max().item(),
            "mean_abs_logprob_diff": diff.mean().item()}


def count_cpu_ops(model, optimizer, batch, autocast: bool) -> int:
    """The aten ops one more step dispatches (CPU side, under the profiler; its time is not counted)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step(model, optimizer, batch, autocast)
    return sum(event.count for event in prof.key_averages() if event.key.startswith("aten::"))


def profile_step(model, optimizer, batch, autocast: bool, out_path: str) -> None:
    """One profiled step: the CUDA kernels and CPU ops that take the most time, as a text table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        train_step(model, optimizer, batch, autocast)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    with open(out_path, "w") as handle:
        handle.write(prof.key_averages().table(sort_by=sort, row_limit=25))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``sys.argv`` when ``argv`` is None); unknown variants stop with their names."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--tokens", type=int, default=16384, help="token budget of the micro batch")
    parser.add_argument("--min-len", type=int, default=150)
    parser.add_argument("--max-len", type=int, default=660)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profile", default="verl_default", help="variant to profile one step of ('' for none)")
    parser.add_argument("--profile-out", default="actor_update_profile.txt")
    parser.add_argument("--out", default="actor_update_bench.json")
    parser.add_argument("--empty-cache-between", action="store_true",
                        help="empty the CUDA allocator cache before every step, as verl's weight sync does")
    parser.add_argument("--check-varlen", action="store_true",
                        help="first compare torch_varlen on the packed batch with SDPA on padded rows")
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v not in ALL_VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {unknown}; known: {sorted(ALL_VARIANTS)}")
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if device.type == "cuda":
        torch.cuda.set_device(0)
    owns_group = not dist.is_initialized()
    if owns_group:  # FSDP2 needs a process group, even for one device
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    summary: dict = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                     "torch": torch.__version__, "tokens_budget": args.tokens,
                     "sequence_lengths": [args.min_len, args.max_len],
                     "empty_cache_between": args.empty_cache_between}
    if args.check_varlen:
        summary["varlen_check"] = check_varlen(args, device)
        print(json.dumps(summary["varlen_check"]), flush=True)
    results = []
    for name in args.variants.split(","):
        result = run_variant(name, args, device)
        results.append(asdict(result))
        print(json.dumps(asdict(result)), flush=True)
        with open(args.out, "w") as handle:  # rewritten after each variant: a killed run keeps what it measured
            json.dump({**summary, "results": results}, handle, indent=2)
    if owns_group:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
