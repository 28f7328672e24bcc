"""The peer in the training-speed benchmark: TRL's GRPOTrainer on the same model, prompts, reward and LoRA.

    python bench/speed/trl_grpo.py --model DIR --data train.parquet --prompts 16 --samples 4 --max-new-tokens 64 \
        --steps 5 --out trl_smoke.json

``--data`` is the parquet from ``verl-ext export`` (the rows verl trains on); the reward is our
``verl_ext.reward.compute_score``, so both trainers score identical text identically. One optimizer step per
generation batch (prompts x samples completions), as in our scripts when PPO_MINI_BATCH_SIZE equals
TRAIN_BATCH_SIZE. Per step it records wall time, TRL's own profiling timers (vLLM generation, weight sync,
reward), generated tokens/s and GPU memory, in the same JSON shape as ``bench/speed/summarize_run.py``; and the
start-up, from the script's start to step 1 starting (``startup_s``).
Needs ``trl==1.16.0`` on PYTHONPATH from a folder of its own (``make setup``: .venv/trl-site; on the GPU machines
TRL_PYTHONPATH): importable beside verl, it breaks verl 0.9.1's model patching (Makefile). The benchmark needs a GPU
and vLLM (colocate mode); ``--generation transformers`` runs on the CPU (tests/test_trl_bench.py, a tiny model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SCRIPT_STARTED = time.time()  # before the heavy imports: start-up counts them, as ours counts verl's


def _timers() -> dict[str, list[float]]:
    """Route TRL's profiling timers (normally sent to W&B only) into a dict we can read per step."""
    from trl.extras import profiling

    collected: dict[str, list[float]] = defaultdict(list)
    original = profiling.ProfilingContext._log_metrics

    def record(self: Any, duration: float) -> None:
        collected[self.name.split(".", 1)[-1]].append(duration)
        original(self, duration)

    profiling.ProfilingContext._log_metrics = record
    return collected


def our_reward(prompts: list, completions: list, data_source: list, reward_model: list, extra_info: list,
               **_: Any) -> list[float]:
    """verl_ext.reward.compute_score over a TRL batch (conversational completions)."""
    from verl_ext.reward import compute_score

    scores = []
    for completion, source, model_info, info in zip(completions, data_source, reward_model, extra_info):
        text = completion[0]["content"] if isinstance(completion, list) else str(completion)
        ground_truth = (model_info or {}).get("ground_truth", "")
        scores.append(compute_score(source, text, ground_truth, info)["score"])
    return scores


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    timers = _timers()
    cuda = torch.cuda.is_available()  # CPU only for checking this script; numbers come from a GPU
    completions_per_step = args.prompts * args.samples
    micro = min(args.micro_batch, completions_per_step)
    if completions_per_step % micro:
        raise ValueError(f"--micro-batch={micro} must divide prompts x samples = {completions_per_step}")
    dataset = Dataset.from_parquet(str(args.data)).select_columns(
        ["prompt", "data_source", "reward_model", "extra_info"])
    config = GRPOConfig(
        output_dir=str(args.work_dir), max_steps=args.steps, learning_rate=args.lr, beta=args.beta,
        num_generations=args.samples, per_device_train_batch_size=micro,
        gradient_accumulation_steps=completions_per_step // micro, max_completion_length=args.max_new_tokens,
        temperature=1.0, use_vllm=args.generation == "vllm", vllm_mode="colocate",
        vllm_gpu_memory_utilization=args.gpu_memory_utilization, vllm_enable_sleep_mode=False,
        gradient_checkpointing=args.gradient_checkpointing, bf16=cuda, use_cpu=not cuda,
        lr_scheduler_type="constant", logging_steps=1, report_to=[], save_strategy="no", seed=args.seed,
        dataloader_num_workers=0,
        model_init_kwargs={"dtype": torch.bfloat16 if cuda else torch.float32, "attn_implementation": "sdpa"},
    )
    lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    steps: list[dict[str, Any]] = []
    step1_started: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            if not step1_started:
                step1_started.append(time.time())
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            for values in timers.values():
                values.clear()
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            row = {"step": len(steps) + 1, "timing_s/step": time.perf_counter() - self.started}
            if cuda:
                row["gpu/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
                row["gpu/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / 2**30
            row.update({f"trl_timer_s/{name}": sum(values) for name, values in timers.items() if values})
            steps.append(row)
            # keep what is measured so far if the run is cut short (shared GPUs, time limits)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"trainer": "trl", "partial": True, "steps": steps,
                                            "startup_s": step1_started[0] - SCRIPT_STARTED}, indent=2))

        def on_log(self, _args: Any, _state: Any, _control: Any, logs: dict | None = None, **__: Any) -> None:
            if logs and steps:
                steps[-1].update({f"trl/{k}": v for k, v in logs.items() if isinstance(v, (int, float))})

    trainer = GRPOTrainer(model=str(args.model), reward_funcs=our_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=lora, callbacks=[StepTimer()])
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    for row in steps:
        tokens = row.get("trl/completions/mean_length", 0.0) * completions_per_step
        row["generated_tokens_per_s_of_step"] = tokens / row["timing_s/step"]
        gen = row.get("trl_timer_s/vLLM.generate")
        if gen:
            row["generated_tokens_per_s_of_gen"] = tokens / gen
    steady = [r["timing_s/step"] for r in steps[1:]]
    return {"trainer": "trl", "settings": {k: str(v) for k, v in vars(args).items()}, "steps": steps,
            "num_steps": len(steps), "train_wall_s": wall,
            # the script's start to step 1 starting: imports, model, LoRA, the colocated vLLM engine
            "startup_s": step1_started[0] - SCRIPT_STARTED if step1_started else None,
            "median_step_s_after_first": statistics.median(steady) if steady else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="parquet from `verl-ext export`")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (TRAIN_BATCH_SIZE)")
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt (ROLLOUT_N)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="MAX_RESPONSE_LENGTH")
    parser.add_argument("--micro-batch", type=int, default=64, help="completions per forward/backward")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=6e-5)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (ours: KL_LOSS_COEF)")
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--generation", choices=["vllm", "transformers"], default="vllm",
                        help="vllm: colocated vLLM (the benchmark); transformers: model.generate (slow)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work-dir", type=Path, default=Path("outputs/trl_grpo"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"TRL GRPO: {result['num_steps']} steps, median {result['median_step_s_after_first']} s after the first "
          f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
