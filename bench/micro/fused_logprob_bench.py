"""Time verl's two fused log-prob implementations on one packed micro batch: ``torch`` and ``triton``; and verl's
``torch`` one run at the response positions only (``torch-responses``, ``LM_HEAD_POSITIONS=response``).

verl's FSDP engine takes the token log-probs of the update from the last hidden states and the LM head in one
fused function when ``model.use_fused_kernels=True`` (our default, ``USE_FUSED_KERNELS=1``). Its
``fused_kernel_options.impl_backend`` picks the implementation (``FUSED_KERNELS_BACKEND`` in our scripts):

- ``torch``: ``verl.utils.experimental.torch_functional.FusedLinearForPPO``, 512-token chunks, each chunk's fp32
  logits (512 x vocab) written to GPU memory, read back for softmax, entropy and log-softmax, and computed again in
  backward;
- ``triton``: ``verl.utils.kernel.linear_cross_entropy.linear_cross_entropy``, Triton kernels that never hold the
  logits in GPU memory (CUDA only).

- ``torch-responses``: verl's ``torch`` function through ``verl_ext.patches.response_logits.head_at_responses``, on the
  rows that predict a response token only, for packed sequences of ``--layout PROMPT:RESPONSE`` tokens each
  (default 145:60, the smoke load's means); the loss reads those positions on every backend.

This calls those functions, as verl's patched ``forward`` does (hidden ``(1, T, H)``, labels ``(1, T)``),
with a GRPO-shaped loss (log-probs times a +-1 advantage; the entropy output unused, as with ``entropy_coeff=0``)
and reports per token budget and backend: forward time, forward + backward time, peak memory, and how far the
log-probs and the hidden-state gradient are from an exact fp32 log-softmax of the full logits on the first
``--check-tokens`` tokens.

    python bench/micro/fused_logprob_bench.py --tokens 16384,65536 --out fused_logprob.json          # on a GPU
    python bench/micro/fused_logprob_bench.py --backends torch,torch-responses --tokens 13128 --layout 145:60
    python bench/micro/fused_logprob_bench.py --device cpu --backends torch --tokens 256 --vocab 1024 --hidden 128
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

BACKENDS = ("torch", "triton", "torch-responses")
# Qwen2.5-0.5B: hidden 896, vocab 151936 (the LM head verl's update multiplies with)
DEFAULT_HIDDEN = 896
DEFAULT_VOCAB = 151936


@dataclass
class Result:
    backend: str
    tokens: int
    forward_s: float = float("nan")
    forward_backward_s: float = float("nan")
    peak_memory_gb: float = float("nan")
    logprob_max_abs_err: float = float("nan")  # against the exact fp32 log-softmax, first check_tokens tokens
    grad_max_rel_err: float = float("nan")  # d hidden, same tokens, max |diff| / max |exact|
    error: str = ""


def response_layout(tokens: int, prompt: int, response: int, device: torch.device):
    """``verl_ext.patches.response_logits.ResponseLayout`` of ``tokens`` packed as sequences of ``prompt + response`` tokens
    (the last one cut short: its response shrinks first)."""
    from verl_ext.patches.response_logits import ResponseLayout

    sequence_ends = list(range(prompt + response, tokens, prompt + response)) + [tokens]
    sequence_offsets = torch.tensor([0, *sequence_ends], device=device)
    lengths = (sequence_offsets.diff() - prompt).clamp(0, response)
    response_offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=device), lengths.cumsum(0)])
    return ResponseLayout(sequence_offsets, response_offsets, tokens, int(response_offsets[-1]))


def response_mask(tokens: int, prompt: int, response: int, device: torch.device) -> torch.Tensor:
    """1 at the positions that predict a response token of ``response_layout``'s sequences, else 0."""
    from verl_ext.patches.response_cut import response_index

    layout = response_layout(tokens, prompt, response, device)
    mask = torch.zeros(1, tokens, device=device)
    mask[0, response_index(layout.sequence_offsets, layout.response_offsets, layout.response_tokens)] = 1
    return mask


def fused_function(backend: str, layout: tuple[int, int] = (145, 60)) \
        -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """verl's fused log-prob function for ``backend``: (hidden (1, T, H), weight (V, H), labels (1, T)) -> (1, T)
    token log-probs in fp32."""
    if backend == "torch-responses":
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        from verl_ext.patches.response_logits import head_at_responses

        fused = FusedLinearForPPO(impl_backend="torch")

        def at_responses(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            # on the host, as verl's offsets come: no read back from the GPU inside the timed call
            where = response_layout(labels.shape[-1], *layout, torch.device("cpu"))
            return head_at_responses(where, fused.forward, hidden, weight, labels, 1.0)[0]

        return at_responses
    if backend == "torch":
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        fused = FusedLinearForPPO(impl_backend="torch")
        return lambda hidden, weight, labels: fused(hidden, weight, labels, 1.0)[0]
    if backend == "triton":
        from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy

        return lambda hidden, weight, labels: linear_cross_entropy(hidden, weight, labels, 1.0, "none")[0].view(
            labels.shape)
    raise ValueError(f"--backends: unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


def exact_log_probs(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token log-probs from the full fp32 logits (the reference; memory grows with tokens x vocab)."""
    logits = hidden.float() @ weight.float().t()
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def make_inputs(tokens: int, hidden_size: int, vocab: int, device: torch.device, dtype: torch.dtype,
                weight_grad: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states, LM head, next-token labels and per-token advantages of one packed micro batch."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    hidden = torch.randn(1, tokens, hidden_size, generator=gen).to(device, dtype)
    weight = (torch.randn(vocab, hidden_size, generator=gen) * 0.02).to(device, dtype)
    labels = torch.randint(0, vocab, (1, tokens), generator=gen).to(device)
    advantages = (torch.randint(0, 2, (1, tokens), generator=gen) * 2 - 1).to(device, torch.float32)
    weight.requires_grad_(weight_grad)  # LoRA leaves the LM head frozen
    return hidden, weight, labels, advantages


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_backend(backend: str, tokens: int, args: argparse.Namespace, device: torch.device) -> Result:
    """One backend at one token budget; an error (e.g. Triton without CUDA) is reported in the result."""
    result = Result(backend, tokens)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    try:
        fn = fused_function(backend, args.layout)
        hidden, weight, labels, advantages = make_inputs(tokens, args.hidden, args.vocab, device, dtype,
                                                         args.weight_grad, args.seed)
        advantages = advantages * response_mask(tokens, *args.layout, device)  # the loss reads responses only
        forward_times, step_times = [], []
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        for i in range(args.warmup + args.iters):
            leaf = hidden.detach().requires_grad_(True)
            _sync(device)
            start = time.perf_counter()
            log_probs = fn(leaf, weight, labels)
            _sync(device)
            middle = time.perf_counter()
            (-(log_probs * advantages).sum()).backward()
            _sync(device)
            end = time.perf_counter()
            if i >= args.warmup:
                forward_times.append(middle - start)
                step_times.append(end - start)
        result.forward_s = statistics.median(forward_times)
        result.forward_backward_s = statistics.median(step_times)
        if device.type == "cuda":
            result.peak_memory_gb = (torch.cuda.max_memory_allocated() - base) / 2**30
        check = min(args.check_tokens, tokens)
        got = log_probs[0, :check].detach().float()
        grad = leaf.grad[0, :check].float()
        exact_leaf = hidden[:, :check].detach().float().requires_grad_(True)
        exact = exact_log_probs(exact_leaf[0], weight.detach(), labels[0, :check])
        (-(exact * advantages[0, :check]).sum()).backward()
        read = advantages[0, :check] != 0  # the positions the loss reads (torch-responses leaves 0 elsewhere)
        result.logprob_max_abs_err = (got - exact.detach())[read].abs().max().item()
        exact_grad = exact_leaf.grad[0]
        result.grad_max_rel_err = ((grad - exact_grad).abs().max() / exact_grad.abs().max().clamp_min(1e-30)).item()
    except Exception as exc:  # a backend that cannot run here is reported, not fatal
        result.error = f"{type(exc).__name__}: {exc}"[:500]
    return result


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="16384,65536", help="comma-separated token budgets (packed micro batch)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN)
    parser.add_argument("--vocab", type=int, default=DEFAULT_VOCAB)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                        help="of the hidden states and the LM head (FSDP2 computes in bf16)")
    parser.add_argument("--weight-grad", action="store_true", help="the LM head trains too (full fine-tune)")
    parser.add_argument("--check-tokens", type=int, default=1024, help="tokens compared with the exact log-softmax")
    parser.add_argument("--layout", default="145:60",
                        help="PROMPT:RESPONSE tokens of each packed sequence; the loss reads the response positions "
                             "(default: the smoke load's means)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="fused_logprob_bench.json")
    args = parser.parse_args(argv)
    try:
        args.token_budgets = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--tokens: expected comma-separated integers, got {args.tokens!r}")
    if not args.token_budgets or min(args.token_budgets) < 1:
        parser.error(f"--tokens: each budget must be a positive integer, got {args.tokens!r}")
    layout = args.layout
    try:
        args.layout = tuple(int(n) for n in layout.split(":"))
    except ValueError:
        args.layout = ()
    if len(args.layout) != 2 or min(args.layout) < 1:
        parser.error(f"--layout: expected PROMPT:RESPONSE, two positive integers, got {layout!r}")
    if min(args.token_budgets) <= args.layout[0]:
        parser.error(f"--tokens: each budget must hold one prompt of --layout {layout} and a response token, "
                     f"got {args.tokens!r}")
    args.backend_list = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(args.backend_list) - set(BACKENDS))
    if unknown or not args.backend_list:
        parser.error(f"--backends: unknown {unknown or args.backends!r}; choose from {', '.join(BACKENDS)}")
    if args.iters < 1 or args.warmup < 0:
        parser.error(f"--iters must be >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}")
    return args


def main(argv: Sequence[str] | None = None) -> list[Result]:
    args = parse_args(argv)
    device = torch.device(args.device)
    results = [time_backend(backend, tokens, args, device)
               for tokens in args.token_budgets for backend in args.backend_list]
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else str(device),
              "hidden": args.hidden, "vocab": args.vocab, "dtype": args.dtype, "weight_grad": args.weight_grad,
              "iters": args.iters, "results": [asdict(r) for r in results]}
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=2)
    for r in results:
        line = (f"{r.backend:7s} {r.tokens:7d} tokens  forward {r.forward_s:.4f} s  forward+backward "
                f"{r.forward_backward_s:.4f} s  peak {r.peak_memory_gb:.2f} GB  log-prob err {r.logprob_max_abs_err:.2e}"
                f"  grad rel err {r.grad_max_rel_err:.2e}")
        print(line + (f"  ERROR {r.error}" if r.error else ""))
    return results


if __name__ == "__main__":
    main()
