"""The ceiling for our rollout: vLLM's offline ``LLM.generate`` on the same model, prompts and sampling settings.

    python bench/speed/vllm_offline.py --model DIR --data train.parquet --prompts 128 --samples 8 --max-tokens 512 \
        --gpu-memory-utilization 0.4 --out vllm.json

``--data`` is the parquet from ``verl-ext export`` (``bench/speed/train_speed.sh`` writes it with the load's games and
task count, the rows our dataset serves); ``--prompts`` rows are drawn from it with ``--seed`` (verl's
dataloader draws a shuffled batch of the same rows). Prompt token ids come from verl's own Continuous Token
builder with the model's chat template (``verl.utils.tokenizer.continuous_token_wiring``, the path verl's
agent loop takes, agent_loop.py:248-254), so vLLM sees the ids our rollout sends it.

Settings mirror verl's rollout server (verl/workers/rollout/vllm_rollout/vllm_async_server.py:307-349):
bfloat16, CUDA graphs unless ``--enforce-eager`` (verl's default ``cudagraph_mode`` FULL_AND_PIECEWISE),
prefix caching and chunked prefill on, temperature 1, top-p 1, top-k off, no log-probs (our train scripts no
longer ask for them: ``ROLLOUT_LOG_PROBS=0``; ``--logprobs`` asks for the sampled token's, ``logprobs=0``, as
verl's ``calculate_log_probs`` does, vllm_async_server.py:622, for ``BYPASS_OLD_LOG_PROB=1``). Scheduling limits
(``--max-num-seqs``, ``--max-num-batched-tokens``) default to vLLM's own offline defaults (on an H100: 1024
sequences, 16384 tokens; verl's rollout.yaml sets 256 and 8192): pass verl's values to see what they cost.
``--fanout n`` sends each prompt once with ``n=samples`` (vLLM fans out internally); ``--fanout requests``
sends ``samples`` separate requests per prompt, as verl's agent loop does. verl also starts vLLM with sleep mode
(its CuMem allocator, to free memory between rollouts): ``--engine-arg enable_sleep_mode=true`` adds it.

The JSON holds the import and engine start times, and per ``generate`` call the wall time, completions,
generated tokens and tokens/s; ``generation_s``/``tokens_per_s`` are medians over calls 2..N (call 1 carries
warm-up, as step 1 does in ``bench/speed/compare_speed.py``). vLLM is imported only inside ``run``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FANOUTS = ("n", "requests")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line settings; errors name the offending flag and value."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="Hugging Face model folder (config + weights)")
    parser.add_argument("--data", type=Path, required=True, help="parquet from `verl-ext export` (prompt column)")
    parser.add_argument("--prompts", type=int, default=128, help="prompts per generate call (TRAIN_BATCH_SIZE)")
    parser.add_argument("--samples", type=int, default=8, help="completions per prompt (ROLLOUT_N)")
    parser.add_argument("--max-tokens", type=int, default=512, help="MAX_RESPONSE_LENGTH")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=-1)
    parser.add_argument("--logprobs", action=argparse.BooleanOptionalAction, default=False,
                        help="ask for the sampled token's log-prob, as verl does with ROLLOUT_LOG_PROBS=1 "
                             "(default: no, as the train scripts' default)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (ENFORCE_EAGER=True)")
    parser.add_argument("--max-num-seqs", type=int, help="vLLM scheduler limit (default: vLLM's)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="vLLM scheduler limit (default: vLLM's)")
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    parser.add_argument("--max-model-len", type=int, help="default: the model's (verl's default too)")
    parser.add_argument("--engine-arg", dest="engine_args", action="append", default=[], metavar="KEY=JSON",
                        help="any other vllm.LLM argument, value as JSON, e.g. async_scheduling=true")
    parser.add_argument("--fanout", choices=FANOUTS, default="n")
    parser.add_argument("--repeats", type=int, default=3, help="generate calls (the first is warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for flag in ("prompts", "samples", "max_tokens", "repeats"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')}={getattr(args, flag)}: must be a positive integer")
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        parser.error(f"--gpu-memory-utilization={args.gpu_memory_utilization}: must be in (0, 1]")
    try:
        args.extra_engine_args = parse_engine_args(args.engine_args)
    except ValueError as err:
        parser.error(str(err))
    return args


def parse_engine_args(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=JSON`` items as a dict (a bare word that is not JSON stays a string)."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--engine-arg {item!r}: expected KEY=VALUE with a vllm.LLM argument name as KEY")
        try:
            parsed[key] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key] = raw
    return parsed


def load_messages(data: Path, prompts: int, seed: int) -> list[list[dict[str, Any]]]:
    """``prompts`` chat prompts (the ``prompt`` column of an export) drawn with ``seed``."""
    import pyarrow.parquet as pq

    if not data.is_file():
        raise FileNotFoundError(f"--data {data}: no such file (write it with `verl-ext export --out {data}`)")
    table = pq.read_table(data)
    if "prompt" not in table.column_names:
        raise ValueError(f"--data {data}: no 'prompt' column (columns: {', '.join(table.column_names)}); "
                         "use the RL export (`verl-ext export`, format rl)")
    rows = table.column("prompt").to_pylist()
    if len(rows) < prompts:
        raise ValueError(f"--prompts={prompts}: {data} holds only {len(rows)} rows")
    picked = sorted(random.Random(seed).sample(range(len(rows)), prompts))
    return [rows[i] for i in picked]


def prompt_token_ids(model: Path, messages: list[list[dict[str, Any]]]) -> list[list[int]]:
    """Token ids as verl's agent loop builds them: its Continuous Token builder for the model's family."""
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    config = model / "config.json"
    model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    tokenizer = AutoTokenizer.from_pretrained(model)
    builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type)
    return [list(builder.build_initial_tokens(list(m))) for m in messages]


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Arguments of ``vllm.LLM``: verl's rollout-server settings, unset scheduling limits left to vLLM."""
    kwargs: dict[str, Any] = {
        "model": str(args.model), "dtype": "bfloat16", "gpu_memory_utilization": args.gpu_memory_utilization,
        "enforce_eager": args.enforce_eager, "enable_prefix_caching": args.prefix_caching,
        "enable_chunked_prefill": True, "seed": args.seed,
    }
    if not args.enforce_eager:
        kwargs["compilation_config"] = {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    kwargs.update(args.extra_engine_args)
    return kwargs


def sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Arguments of ``vllm.SamplingParams`` for one request (``n`` depends on the fan-out)."""
    return {"n": args.samples if args.fanout == "n" else 1, "temperature": args.temperature, "top_p": args.top_p,
            "top_k": args.top_k, "max_tokens": args.max_tokens, "logprobs": 0 if args.logprobs else None,
            "repetition_penalty": 1.0}


def requests(ids: list[list[int]], samples: int, fanout: str) -> list[dict[str, list[int]]]:
    """vLLM token prompts: each prompt once (``n`` fan-out) or ``samples`` times in a row (``requests``)."""
    copies = 1 if fanout == "n" else samples
    return [{"prompt_token_ids": list(p)} for p in ids for _ in range(copies)]


def measure(llm: Any, prompts: list[dict[str, list[int]]], sampling: Any, repeats: int,
            clock: Callable[[], float] = time.perf_counter) -> list[dict[str, float]]:
    """Wall time and output counts of ``repeats`` ``llm.generate`` calls over the same prompts."""
    runs = []
    for _ in range(repeats):
        started = clock()
        outputs = llm.generate(prompts, sampling, use_tqdm=False)
        wall = clock() - started
        completions = [c for o in outputs for c in o.outputs]
        tokens = sum(len(c.token_ids) for c in completions)
        runs.append({"wall_s": wall, "completions": len(completions), "generated_tokens": tokens,
                     "tokens_per_s": tokens / wall if wall > 0 else 0.0,
                     "mean_tokens": tokens / len(completions) if completions else 0.0,
                     "finished_by_length": sum(1 for c in completions if c.finish_reason == "length")})
    return runs


def device_name() -> str:
    """The GPU the numbers come from (``cpu`` without CUDA)."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def report(args: argparse.Namespace, ids: list[list[int]], runs: list[dict[str, float]], import_s: float,
           engine_start_s: float, vllm_version: str) -> dict[str, Any]:
    """The JSON written to ``--out``: settings, start-up times, every call, and the steady-state medians."""
    steady = runs[1:] or runs
    expected = args.prompts * args.samples
    short = [i + 1 for i, r in enumerate(runs) if r["completions"] != expected]
    if short:
        raise RuntimeError(f"generate calls {short} returned a completion count other than "
                           f"--prompts x --samples = {expected}")
    return {
        "tool": "vllm_offline", "vllm_version": vllm_version, "device": device_name(), "model": str(args.model),
        "data": str(args.data),
        "prompts": args.prompts, "samples": args.samples, "completions_per_call": expected,
        "max_tokens": args.max_tokens, "fanout": args.fanout,
        "prompt_tokens_mean": statistics.fmean(len(p) for p in ids),
        "engine_kwargs": engine_kwargs(args), "sampling": sampling_kwargs(args),
        "import_s": import_s, "engine_start_s": engine_start_s, "runs": runs,
        "generation_s": statistics.median(r["wall_s"] for r in steady),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steady),
        "mean_tokens": statistics.median(r["mean_tokens"] for r in steady),
        "medians_over": "calls 2..N" if len(runs) > 1 else "the only call",
    }


def run(args: argparse.Namespace, vllm: Any = None, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Build the prompts, start the engine, time the generate calls. ``vllm``: the module (default: import it)."""
    ids = prompt_token_ids(args.model, load_messages(args.data, args.prompts, args.seed))
    started = clock()
    if vllm is None:
        import vllm  # GPU machine only; everything above runs without it
    imported = clock()
    # verl's token builder (above) may have initialised CUDA in this process, and a forked engine core then
    # fails ("Cannot re-initialize CUDA in forked subprocess", H100 2026-11-23): start it the way verl does
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    llm = vllm.LLM(**engine_kwargs(args))
    ready = clock()
    sampling = vllm.SamplingParams(**sampling_kwargs(args))
    runs = measure(llm, requests(ids, args.samples, args.fanout), sampling, args.repeats, clock)
    return report(args, ids, runs, imported - started, ready - imported, str(getattr(vllm, "__version__", "")))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"vLLM offline: engine start {result['engine_start_s']:.1f} s (+{result['import_s']:.1f} s import); "
          f"{result['completions_per_call']} completions in {result['generation_s']:.2f} s, "
          f"{result['tokens_per_s']:,.0f} tokens/s ({result['medians_over']}) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
