"""Benchmark: peak RSS and wall time of `merge-ppo` vs `python -m verl.model_merger merge --backend fsdp`.

Builds (once, cached in --workdir) a random-init model of the given shape, saves a real verl FSDP2 checkpoint
of it with `--world-size` gloo ranks (verl's FSDPCheckpointManager), then runs both mergers as child processes,
alternating, `--repeats` times each. Peak RSS is `getrusage(RUSAGE_CHILDREN).ru_maxrss` taken in a small
launcher process that runs the command: measuring straight from this (large) process would not work, since
Linux carries a forking process's peak RSS over into the child's `ru_maxrss` across fork+exec. Both outputs
are checked to hold bit-identical bf16 tensors.

    PYTHONPATH=. python bench/micro/bench_merge.py --shape qwen2.5-0.5b --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from verl_ext.merge.synthetic import (  # noqa: E402
    QWEN25_05B_SHAPE,
    TINY_QWEN2,
    CheckpointJob,
    write_base_model,
    write_verl_checkpoints,
)

SHAPES = {"qwen2.5-0.5b": QWEN25_05B_SHAPE, "tiny": TINY_QWEN2}


@dataclass
class Measurement:
    tool: str
    run: int
    wall_s: float
    peak_rss_mib: float


# Runs argv[2:], then writes "<exit code> <wall s> <peak RSS KiB of the command>" to the file argv[1].
LAUNCHER = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[2:]).returncode
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    out.write(f"{code} {wall} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
"""


def run_child(argv: list[str], env: dict[str, str], workdir: Path) -> tuple[float, float]:
    """Run `argv` under the launcher; return (wall seconds, peak RSS MiB) of that command alone."""
    result_file = workdir / "launcher-result.txt"
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(result_file), *argv],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    code, wall, maxrss_kib = result_file.read_text().split()
    if proc.returncode != 0 or int(code) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({code}):\n{proc.stderr[-3000:]}")
    return float(wall), int(maxrss_kib) / 1024  # Linux reports KiB


def build_checkpoint(workdir: Path, shape: str, world_size: int) -> Path:
    experiment = workdir / f"ckpt-{shape}-ws{world_size}"
    if (experiment / "latest_checkpointed_iteration.txt").exists():
        return experiment / "global_step_1" / "actor"
    shutil.rmtree(experiment, ignore_errors=True)
    base = workdir / f"base-{shape}"
    if not (base / "config.json").exists():
        print(f"writing random {shape} base model to {base}", flush=True)
        write_base_model(base, SHAPES[shape], dtype=torch.bfloat16)
    print(f"writing verl FSDP2 checkpoint (world size {world_size}) to {experiment}", flush=True)
    write_verl_checkpoints(
        [CheckpointJob(str(experiment), str(base), strategy="fsdp2", train=False, save_optimizer=False)],
        world_size=world_size,
    )
    return experiment / "global_step_1" / "actor"


def load_tensors(model_dir: Path) -> dict[str, tuple[Path, str]]:
    where = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                where[name] = (path, name)
    return where


def same_tensors(a_dir: Path, b_dir: Path) -> bool:
    a, b = load_tensors(a_dir), load_tensors(b_dir)
    if a.keys() != b.keys():
        return False
    for name in a:
        with safe_open(a[name][0], framework="pt") as fa, safe_open(b[name][0], framework="pt") as fb:
            if not torch.equal(fa.get_tensor(name), fb.get_tensor(name)):
                return False
    return True


def output_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-merge"))
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    actor = build_checkpoint(args.workdir, args.shape, args.world_size)
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    ours_out, verl_out = args.workdir / "out-merge-ppo", args.workdir / "out-verl"
    commands = {
        "merge-ppo": [sys.executable, "-m", "verl_ext.merge", str(actor), "-o", str(ours_out), "--force",
                      "--no-progress"],
        "verl.model_merger": [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                              "--local_dir", str(actor), "--target_dir", str(verl_out)],
        "python + imports only": [sys.executable, "-c", "import verl_ext.merge.pipeline"],
    }
    results: list[Measurement] = []
    for run in range(args.repeats):
        for tool, argv in commands.items():
            if tool == "verl.model_merger":
                shutil.rmtree(verl_out, ignore_errors=True)
            wall, rss = run_child(argv, env, args.workdir)
            results.append(Measurement(tool, run, round(wall, 2), round(rss, 1)))
            print(f"{tool:<28} run {run}: {wall:7.2f} s  peak RSS {rss:8.1f} MiB", flush=True)

    model_mib = output_bytes(ours_out) / 2**20
    shard_mib = sum(p.stat().st_size for p in actor.glob("model_world_size_*.pt")) / 2**20
    identical = same_tensors(ours_out, verl_out)
    print(f"\nmodel bytes (bf16 safetensors written): {model_mib:.1f} MiB; rank shards (fp32): {shard_mib:.1f} MiB")
    print(f"outputs bit-identical: {identical}")
    print("\n| tool | wall time (s), best | peak RSS (MiB), max | peak RSS / model bytes |")
    print("|---|---|---|---|")
    for tool in commands:
        rows = [r for r in results if r.tool == tool]
        best_wall = min(r.wall_s for r in rows)
        max_rss = max(r.peak_rss_mib for r in rows)
        print(f"| {tool} | {best_wall:.1f} | {max_rss:.0f} | {max_rss / model_mib:.2f}x |")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    print(f"\nmachine: {machine}; shape {args.shape}, world size {args.world_size}, repeats {args.repeats}")
    if args.json:
        args.json.write_text(json.dumps({
            "shape": args.shape, "world_size": args.world_size, "model_mib": model_mib, "shard_mib": shard_mib,
            "identical": identical, "machine": machine, "runs": [asdict(r) for r in results],
        }, indent=2))


if __name__ == "__main__":
    main()
