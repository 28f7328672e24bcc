"""Python's full garbage collections during training steps, with and without the start-up heap frozen (GC_FREEZE).

Each mode runs in its own child process that first imports what verl's actor worker imports
(``verl.workers.engine_workers``), then builds a Qwen2 of ``--layers`` decoder layers with a PEFT LoRA adapter on
every linear and non-reentrant activation checkpointing (verl's actor layout without FSDP), and trains it for
``--steps`` steps (forward, backward, AdamW on the adapter), timing each step and every garbage collection by
generation. ``freeze`` calls ``verl_ext.patches.gc_freeze.freeze_heap`` after the build and after step 1, where the train
scripts' ``GC_FREEZE=1`` freezes verl's worker. The width is small on purpose: the number of Python objects a step
creates follows the number of ops (layers), not the width, and a small width keeps the CPU run short.

    python bench/micro/gc_pause_bench.py --steps 60 --out gc_pause.json      # both modes, a table on stdout
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = ("none", "freeze")


def run_mode(mode: str, steps: int, layers: int, device: str) -> dict:
    """One mode in this process: the step times and the collections of each step."""
    import torch
    import verl.workers.engine_workers  # noqa: F401  (the worker's imports: their objects are the heap to walk)
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl_ext.patches.gc_freeze import freeze_heap

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (4, 64), device=device)

    events: list[tuple[int, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            events.append((info["generation"], time.perf_counter() - started[0]))

    if mode == "freeze":
        freeze_heap("the model build")
    gc.callbacks.append(on_gc)
    rows = []
    for step in range(1, steps + 1):
        events.clear()
        begin = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - begin
        full = [s for generation, s in events if generation == 2]
        rows.append({"step": step, "s": seconds, "collections": len(events), "full": len(full),
                     "full_s": sum(full)})
        if mode == "freeze" and step == 1:
            gc.callbacks.remove(on_gc)
            freeze_heap("step 1")
            gc.callbacks.append(on_gc)
    gc.callbacks.remove(on_gc)
    return {"mode": mode, "tracked_objects": len(gc.get_objects()), "frozen_objects": gc.get_freeze_count(),
            "steps": rows}


def summary(result: dict) -> dict:
    """Medians and the full collections' cost over steps 2..N (step 1 is warm-up)."""
    later = result["steps"][1:]
    times = sorted(row["s"] for row in later)
    full = [row["full_s"] for row in later if row["full"]]
    return {
        "mode": result["mode"],
        "tracked objects": result["tracked_objects"],
        "frozen objects": result["frozen_objects"],
        "median step s": statistics.median(times),
        "p95 step s": times[min(len(times) - 1, int(0.95 * len(times)))],
        "max step s": times[-1],
        "mean step s": statistics.fmean(times),
        "full collections": sum(row["full"] for row in later),
        "full collection s (max)": max(full, default=0.0),
        "full collections s (total)": sum(full),
        "steps with a full collection": [row["step"] for row in later if row["full"]],
    }


def table(summaries: list[dict]) -> str:
    keys = [key for key in summaries[0] if key != "mode"]
    lines = ["| | " + " | ".join(s["mode"] for s in summaries) + " |", "|---|" + "---:|" * len(summaries)]
    for key in keys:
        cells = [f"{s[key]:.3f}" if isinstance(s[key], float) else f"{s[key]:,}" if isinstance(s[key], int)
                 else str(s[key]) for s in summaries]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--layers", type=int, default=24, help="decoder layers (Qwen2.5-0.5B has 24)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="JSON with every step of both modes and the summary")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # a child's one mode
    args = parser.parse_args()
    if args.steps < 2:
        parser.error(f"--steps {args.steps}: at least 2 (step 1 is warm-up)")
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.steps, args.layers, args.device)))
        return
    results = []
    for mode in MODES:  # a fresh process each, so that one mode's heap is not the other's
        child = subprocess.run([sys.executable, __file__, "--mode", mode, "--steps", str(args.steps),
                                "--layers", str(args.layers), "--device", args.device],
                               capture_output=True, text=True, check=False)
        if child.returncode != 0:
            sys.exit(f"mode {mode} failed ({child.returncode}):\n{child.stderr[-3000:]}")
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    summaries = [summary(result) for result in results]
    print(table(summaries))
    if args.out:
        args.out.write_text(json.dumps({"args": {"steps": args.steps, "layers": args.layers, "device": args.device},
                                        "summary": summaries, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
