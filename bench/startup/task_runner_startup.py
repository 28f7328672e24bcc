"""Start-up of verl's TaskRunner as a Ray actor (verl's way) and in the driver process (``TASK_RUNNER=driver``),
on a machine without a GPU: each run goes as far as a run can without one, to verl's GPU resource check.

    python bench/startup/task_runner_startup.py [--repeats 2] [--game-types tic_tac_toe] --out task_runner_startup.json

Each run is ``train/scripts/openspiel-ppo.sh``'s own command (``--dry-run`` with ``RUN_PROFILE=smoke``, a tiny
random model, ``PREFLIGHT_IN_PROCESS=0``: the CPU machine has no vLLM for the pre-flight's import check) plus
CPU settings (Ray told of 8 CPUs so TransferQueue's actors can start on 2 cores, 2 storage units, console
logger). Its output is stamped line by line and timed by ``bench/startup/startup_breakdown.py``'s milestones: Ray
started -> TaskRunner running (its config print) -> datasets built (after TransferQueue and the trainer's
constructor) -> the GPU check's error. Modes alternate within each repeat. On a GPU machine this would train:
there, ``bench/speed/train_speed.sh`` with ``TASK_RUNNER=driver`` measures the whole start-up (docs/runs/2026-11-25-cpu-task-runner/NOTES.md, section 0j).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import startup_breakdown  # noqa: E402  (a sibling script, not a package)

from verl_ext.launch import logtee  # noqa: E402

MODES = ("actor", "driver")
CPU_OVERRIDES = ["trainer.logger=[console]", "ray_kwargs.ray_init.num_cpus=8",
                 "transfer_queue.backend.SimpleStorage.num_data_storage_units=2"]
GPU_CHECK = "Total available GPUs 0 is less than total desired GPUs"
PHASES = (("ray", "task_runner", "Ray started -> TaskRunner running"),
          ("task_runner", "transfer_queue", "TaskRunner running -> datasets built"),
          ("launch", "transfer_queue", "launch -> datasets built"))


def build_model(out: Path, game_types: str) -> None:
    """A tiny random Qwen2 whose tokenizer is trained on the run's own prompts (as the tests' fixture does)."""
    from verl_ext.mixture import EnvMixture
    from verl_ext.tiny_model import build_qwen2, build_tokenizer

    mixture = EnvMixture({"openspiel": {"game_types": game_types.split(","), "num_tasks_per_case": 8}})
    texts = [mixture.build(ref).messages[0]["content"] for ref in mixture.plan("train")]
    build_qwen2(out, "tiny", build_tokenizer(out.with_name("tokenizer"), [*texts, "<answer>a1</answer>"]))


def launch_command(mode: str, model: Path, game_types: str, checkpoints: Path) -> list[str]:
    """The train script's command for ``mode`` (its --dry-run), with the CPU settings."""
    # TransferQueue in verl's order, so the two commands differ only in where the TaskRunner runs
    env = {**os.environ, "RUN_PROFILE": "smoke", "TASK_RUNNER": mode, "PREFLIGHT_IN_PROCESS": "0",
           "TRANSFER_QUEUE_START": "serial", "ROLLOUT_MODEL_INFO": "off",
           "MODEL_PATH": str(model), "GAME_TYPES": game_types, "CHECKPOINT_DIR": str(checkpoints),
           "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], env=env, check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    argv = shlex.split(out)
    if mode == "actor":  # PREFLIGHT_IN_PROCESS=0 and TASK_RUNNER=actor: verl's own entry point
        assert argv[1:3] == ["-m", "verl.trainer.main_ppo"], argv[:3]
    return [*argv, *CPU_OVERRIDES]


def stamped_run(command: list[str], timeout: float) -> tuple[list[str], int]:
    """Run ``command``; its output lines stamped with ``verl_ext/launch/logtee.py``'s stamp, and its status."""
    lines = [_stamped(logtee.LAUNCH_MARK)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_DEDUP_LOGS": "0"})
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(_stamped(line.rstrip()))
        if time.monotonic() > deadline:
            proc.kill()
            break
    return lines, proc.wait()


def _stamped(text: str) -> str:
    return logtee.stamp(time.time()).decode() + text


def measure(lines: list[str], status: int) -> dict:
    """The phases of one run, from its stamped lines; whether it ended at verl's GPU check."""
    result = startup_breakdown.breakdown(line + "\n" for line in lines)
    at = {row["key"]: row["since_launch_s"] for row in result["milestones"]}
    phases = {name: round(at[end] - at[start], 2) if start in at and end in at else None
              for start, end, name in PHASES}
    check = next((line for line in lines if GPU_CHECK in line), None)
    to_check = None
    if check is not None:
        stamps = [startup_breakdown.parse_line(line).stamped for line in (lines[0], check)]
        to_check = round((stamps[1] - stamps[0]).total_seconds(), 2)
    return {"phases_s": phases, "to_gpu_check_s": to_check, "reached_gpu_check": check is not None, "status": status}


def summary(runs: list[dict]) -> dict:
    """Median of each phase per mode."""
    out: dict[str, dict] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r["reached_gpu_check"]]
        medians = {}
        for _, _, name in PHASES:
            values = [r["phases_s"][name] for r in mine if r["phases_s"][name] is not None]
            medians[name] = round(statistics.median(values), 2) if values else None
        totals = [r["to_gpu_check_s"] for r in mine]
        medians["launch -> GPU check"] = round(statistics.median(totals), 2) if totals else None
        out[mode] = {"runs": len(mine), "median_s": medians}
    return out


def markdown(result: dict) -> str:
    names = [name for _, _, name in PHASES] + ["launch -> GPU check"]
    lines = ["| mode | runs | " + " | ".join(f"{n} s" for n in names) + " |", "|---|---:|" + "---:|" * len(names)]
    for mode, row in result["summary"].items():
        lines.append(f"| {mode} | {row['runs']} | " + " | ".join(str(row["median_s"][n]) for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode, alternating (default 2)")
    parser.add_argument("--game-types", default="tic_tac_toe")
    parser.add_argument("--work-dir", type=Path, default=Path("outputs/task_runner_startup"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    import torch

    if torch.cuda.is_available():
        parser.error("a GPU is visible: this bench stops at verl's GPU check and would train here; on a GPU "
                     "machine measure with bench/speed/train_speed.sh and TASK_RUNNER=driver (docs/runs/2026-11-25-cpu-task-runner/NOTES.md, section 0j)")
    model = args.work_dir / "model"
    if not (model / "config.json").is_file():
        build_model(model, args.game_types)
    runs = []
    for repeat in range(args.repeats):
        for mode in MODES:
            command = launch_command(mode, model.resolve(), args.game_types, (args.work_dir / "checkpoints").resolve())
            lines, status = stamped_run(command, args.timeout)
            run = {"mode": mode, "repeat": repeat, **measure(lines, status)}
            print(json.dumps(run), flush=True)
            runs.append(run)
    result = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "runs": runs, "summary": summary(runs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(r["reached_gpu_check"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
