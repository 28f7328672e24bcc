"""Where a verl run's start-up goes: launch -> Ray -> actor (FSDP) init -> vLLM engine (weights, compile, CUDA
graphs) -> ready to fit -> first rollout -> initial validation -> step 1, from the run's console log.

    python bench/startup/startup_breakdown.py LOGDIR/run-20261123-112916.log [--samples RUN.samples.jsonl] --out startup.json

Times come from, in order of preference: the line's own timestamp (Ray and verl log with milliseconds, vLLM
to the second without a year, which is taken from the nearest full timestamp), else the wall-clock stamp the
train scripts put on every log line (``verl_ext/launch/logtee.py``, ``LOG_TIMESTAMPS=1``). Time 0 is the
logtee's launch line (the train script's start), else ``--launched``, else the first timestamped line (said
so in the output). Each milestone is the first line matching its pattern (the first that carries a time); ``MILESTONES`` lists every pattern
with the verl 0.9.1 / vLLM 0.24.0 / Ray 2.60.0 source that prints it. vLLM's own durations (weights, torch
.compile, CUDA graph capture, whole engine init) are read from its messages. verl logs nothing around the
first weight sync (``PPOTrainerSync.on_init_end``, verl/trainer/ppo/v1/trainer_sync.py:31-33) or the agent-loop
workers' creation (main_ppo.py:154), which lie between "ready to fit" and the first reward of the first rollout
(``--samples``: our per-sample log, ``VERL_EXT_SAMPLE_LOG``); the first worker's constructor line marks when the
first of those processes was up. Without an initial validation this falls inside step 1.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}) \| ")  # verl_ext/launch/logtee.py
# Ray: "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- " (ray/_private/ray_constants.py:396);
# verl and Python logging: "%(levelname)s:%(asctime)s:" (verl/utils/logging_utils.py:27,39)
FULL_TIME = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})(?:\t[A-Z]+ |:)")
# vLLM: "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d]" with datefmt "%m-%d %H:%M:%S" (vllm/logger.py:22-26)
VLLM_TIME = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[")


@dataclass(frozen=True)
class Milestone:
    key: str
    label: str
    pattern: str | None  # regular expression searched in each line without colour codes; None: timed otherwise
    source: str  # where the message is printed


MILESTONES: tuple[Milestone, ...] = (
    Milestone("launch", "train script started", re.escape("[verl-ext] launch: train script started"),
              "verl_ext/launch/logtee.py (LAUNCH_MARK)"),
    Milestone("command", "checks done, run command started", re.escape("[verl-ext] launch: command started"),
              "verl_ext/launch/logtee.py (COMMAND_MARK)"),
    Milestone("preflight", "pre-flight done inside verl's process (PREFLIGHT_IN_PROCESS=1)",
              re.escape("[verl-ext] launch: pre-flight done in process"), "verl_ext/launch/ppo_main.py (PREFLIGHT_DONE)"),
    Milestone("ray_init", "verl imported, config validated (ray.init next)", r"^ray init kwargs: ",
              "verl trainer/main_ppo.py:73"),
    Milestone("vllm_model_info", "vLLM model info cached in the background (ROLLOUT_MODEL_INFO=warm)",
              re.escape("[verl-ext] vLLM model info: "), "verl_ext/launch/vllm_model_info.py (MARK)"),
    Milestone("ray", "Ray started", r"Started a local Ray instance\.|Connected to Ray cluster\.",
              "ray 2.60.0 ray/_private/worker.py:2025-2039"),
    # TASK_RUNNER=driver: the same print comes from the driver process, without Ray's actor prefix
    Milestone("task_runner", "TaskRunner running (its imports done)",
              r"\((?:TaskRunnerV1|OverlappedTaskRunner) pid=\d+\) \{'actor_rollout_ref'|^\{'actor_rollout_ref'",
              "verl trainer/main_ppo.py:144 (pprint of the config, no time of its own)"),
    # TRANSFER_QUEUE_START=overlap: the datasets are built while TransferQueue starts, and its own line follows
    Milestone("transfer_queue", "TransferQueue started, trainer building datasets", r"Using dataset class: ",
              "verl utils/dataset/rl_dataset.py:594, after transfer_queue.init (main_ppo.py:149) and the trainer's "
              "constructor start"),
    Milestone("transfer_queue_ready", "TransferQueue ready (TRANSFER_QUEUE_START=overlap: started beside the trainer)",
              re.escape("[verl-ext] launch: TransferQueue ready"),
              "verl_ext/patches/transfer_queue_start.py (READY_MARK)"),
    Milestone("worker_group", "FSDP worker processes created", r"create worker group ",
              "verl trainer/ppo/v1/trainer_base.py:312"),
    Milestone("actor_init", "actor (FSDP) model initialised", r"actor and ref model engine initialized",
              "verl trainer/ppo/v1/trainer_base.py:325"),
    Milestone("reward_workers", "reward loop workers created", r"reward loop manager initialized",
              "verl trainer/ppo/v1/trainer_base.py:346"),
    Milestone("vllm_server", "vLLM server actor started", r"replica_rank: \d+, node_rank: \d+|\['serve',",
              "verl workers/rollout/vllm_rollout/vllm_async_server.py:1121-1128 (or its `serve` argument list, :456-459)"),
    # On a machine's first run vLLM inspects the model class in a fresh interpreter here unless its model-info cache
    # has the answer (ROLLOUT_MODEL_INFO=warm fills it at launch; docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q)
    Milestone("vllm_architecture", "vLLM architecture resolved (its model-info inspection)", r"Resolved architecture: ",
              "vllm 0.24.0 vllm/config/model.py:598"),
    Milestone("vllm_engine_start", "vLLM engine core starting", r"Initializing a V1 LLM engine \(v",
              "vllm 0.24.0 vllm/v1/engine/core.py:113-118"),
    # With verl's `mp` executor the GPU worker is one more process (spawned, imports vLLM); with `uni` it is
    # created inside the engine core process (docs/runs/2026-11-25-h100-fast-start/NOTES.md, section 0f): this line splits the two from the weights' load.
    Milestone("vllm_worker", "vLLM GPU worker created (its process started and imported, with `mp`)",
              r"Injected <class '[\w.]+'> into <class 'vllm\.v1\.worker\.gpu_worker\.Worker'>"
              r"|\] world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=",
              "vllm 0.24.0 vllm/v1/worker/worker_base.py:282 (worker extension; else the distributed init, "
              "distributed/parallel_state.py:1588)"),
    Milestone("vllm_weights", "vLLM weights loaded",
              r"Model loading took |Loading safetensors checkpoint shards: 100%",
              "vllm 0.24.0 vllm/v1/worker/gpu_model_runner.py:5255-5259 (or the loading bar, "
              "model_loader/weight_utils.py:835)"),
    Milestone("vllm_compile", "vLLM torch.compile done",
              r"torch\.compile (?:took|and initial profiling/warmup run together took) [\d.]+ s in total",
              "vllm 0.24.0 vllm/compilation/monitor.py:20, decorators.py:672-676"),
    Milestone("vllm_kv_cache", "vLLM KV cache sized", r"GPU KV cache size: ",
              "vllm 0.24.0 vllm/v1/core/kv_cache_utils.py:2146"),
    Milestone("vllm_graphs_start", "vLLM CUDA graph capture started", r"Capturing CUDA graphs \(",
              "vllm 0.24.0 vllm/v1/worker/gpu_model_runner.py:6718 (its progress bar)"),
    Milestone("vllm_graphs", "vLLM CUDA graph capture done", r"Graph capturing finished in ",
              "vllm 0.24.0 vllm/v1/worker/gpu_model_runner.py:6656-6660"),
    Milestone("vllm_engine_ready", "vLLM engine ready",
              r"init engine \(profile, create kv cache, warmup model\) took ",
              "vllm 0.24.0 vllm/v1/engine/core.py:326-348"),
    Milestone("vllm_server_ready", "vLLM server ready (verl)",
              r"Initializing a V1 LLM engine with config: |LLMServerManager: \[",
              "verl workers/rollout/vllm_rollout/vllm_async_server.py:529-530 (or the server list, "
              "workers/rollout/llm_server.py:487)"),
    Milestone("checkpoint_manager", "weight-sync manager created", r"checkpoint engine manager initialized",
              "verl trainer/ppo/v1/trainer_base.py:383"),
    Milestone("ready_to_fit", "ready to fit (before the first weight sync)", r"all initialize finished, ready to fit",
              "verl trainer/ppo/v1/trainer_base.py:394"),
    Milestone("agent_loop_worker", "first agent-loop worker constructed (its process started and imported)",
              r"\(AgentLoopWorker\w* pid=\d+\) Using dataset class: ",
              "verl experimental/agent_loop/agent_loop.py:506 (AgentLoopWorker.__init__ -> get_dataset_class, "
              "utils/dataset/rl_dataset.py:594); the workers are created after ready to fit (main_ppo.py:154)"),
    Milestone("first_val_reward", "first reward of the validation rollout", None,
              "our sample log (--samples): first split=val line"),
    Milestone("validation_done", "initial validation done", r"Initial validation metrics: ",
              "verl trainer/ppo/v1/trainer_base.py:444 (pprint, no time of its own)"),
    Milestone("step1_start", "step 1 started", None, "step 1's line minus its timing_s/step"),
    Milestone("first_train_reward", "first reward of step 1's rollout", None,
              "our sample log (--samples): first split=train line"),
    Milestone("step1_end", "step 1 logged", r"step:1 - ",
              "verl utils/logger/aggregate_logger.py:27 via trainer_base.py:514 (no time of its own)"),
)
# vLLM's own durations, from its messages
REPORTED = {
    "vllm_weights_load_s": (re.compile(r"Model loading took \S+ GiB memory and ([\d.]+) seconds"),
                            "vllm/v1/worker/gpu_model_runner.py:5255-5259"),
    "vllm_torch_compile_s": (re.compile(r"torch\.compile (?:took|and initial profiling/warmup run together "
                                        r"took) ([\d.]+) s in total"), "vllm/compilation/monitor.py:20"),
    "vllm_graph_capture_s": (re.compile(r"Graph capturing finished in ([\d.]+) secs"),
                             "vllm/v1/worker/gpu_model_runner.py:6656-6660"),
    "vllm_engine_init_s": (re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
                           "vllm/v1/engine/core.py:326-348"),
}
STEP_TIME = re.compile(r"timing_s/step:([\d.]+)")


@dataclass
class Line:
    text: str  # without colour codes and without our stamp
    native: datetime | None  # the line's own full timestamp
    vllm_time: str | None  # "MM-DD HH:MM:SS" (vLLM gives no year)
    stamped: datetime | None  # when the line reached the log (logtee)


def parse_line(raw: str) -> Line:
    """A console line's text and whatever times it carries."""
    text = ANSI.sub("", raw.rstrip("\r\n"))
    stamped = None
    if m := STAMP.match(text):
        stamped = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
        text = text[m.end():]
    native = None
    if m := FULL_TIME.search(text):
        native = datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
    vllm_time = m.group(1) if (m := VLLM_TIME.search(text)) else None
    return Line(text, native, vllm_time, stamped)


def _year_hint(lines: Sequence[Line], index: int) -> int | None:
    for offset in range(len(lines)):
        for j in (index - offset, index + offset):
            if 0 <= j < len(lines) and (full := lines[j].native or lines[j].stamped):
                return full.year
    return None


def line_time(lines: Sequence[Line], index: int) -> tuple[datetime | None, str]:
    """When line ``index`` was written and where that time comes from."""
    line = lines[index]
    if line.native:
        return line.native, "own timestamp"
    if line.vllm_time and (year := _year_hint(lines, index)):
        return datetime.strptime(f"{year}-{line.vllm_time}", "%Y-%m-%d %H:%M:%S"), "own timestamp (s, year inferred)"
    if line.stamped:
        return line.stamped, "log stamp"
    return None, "no time on this line"


def sample_times(path: Path) -> dict[str, datetime]:
    """First reward time of the validation and of the training rollout in our per-sample log."""
    found: dict[str, datetime] = {}
    with path.open() as handle:
        for raw in handle:
            try:
                row = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a line cut short when the run was killed
            key = {"val": "first_val_reward", "train": "first_train_reward"}.get(row.get("split"))
            if key and key not in found:
                found[key] = datetime.fromtimestamp(float(row["time"]))
            if len(found) == 2:
                break
    return found


def breakdown(raw_lines: Iterable[str], samples: dict[str, datetime] | None = None,
              launched: datetime | None = None) -> dict[str, Any]:
    """Milestone times since launch, the gaps between them and vLLM's reported durations."""
    lines = [parse_line(r) for r in raw_lines]
    found: dict[str, dict[str, Any]] = {}
    for m in MILESTONES:
        if m.pattern is None:
            continue
        pattern = re.compile(m.pattern)
        matches = [i for i, line in enumerate(lines) if pattern.search(line.text)]
        # progress bars are also echoed without the stamp (after a carriage return): take a timed copy
        index = next((i for i in matches if line_time(lines, i)[0] is not None), matches[0] if matches else None)
        if index is not None:
            at, how = line_time(lines, index)
            found[m.key] = {"at": at, "time_from": how, "line": lines[index].text[:200], "index": index}
    for key, at in (samples or {}).items():
        found[key] = {"at": at, "time_from": "sample log", "line": ""}
    step1 = found.get("step1_end")
    if step1 and step1["at"] and (m := STEP_TIME.search(lines[step1["index"]].text)):
        found["step1_start"] = {"at": step1["at"] - timedelta(seconds=float(m.group(1))),
                                "time_from": step1["time_from"], "line": f"step:1 line, timing_s/step:{m.group(1)}"}
    origin, origin_from = _origin(lines, found, launched)
    rows = []
    for m in MILESTONES:
        entry = found.get(m.key)
        if entry and entry["at"] is not None and origin is not None:
            rows.append({"key": m.key, "label": m.label,
                         "since_launch_s": round((entry["at"] - origin).total_seconds(), 3),
                         "time_from": entry["time_from"], "source": m.source, "line": entry["line"]})
    rows.sort(key=lambda r: r["since_launch_s"])  # stable: the table's order where times tie
    for previous, row in zip([None, *rows], rows):
        row["after_previous_s"] = round(row["since_launch_s"] - previous["since_launch_s"], 3) if previous else None
    timed = {r["key"] for r in rows}
    missing = [{"key": m.key, "label": m.label, "why": "no time on its line" if m.key in found else "not found"}
               for m in MILESTONES if m.key not in timed]
    reported = {}
    for name, (pattern, _source) in REPORTED.items():
        values = [float(x.group(1)) for line in lines if (x := pattern.search(line.text))]
        if values:
            reported[name] = values[0]
    return {"origin": origin.isoformat(sep=" ") if origin else None, "origin_from": origin_from,
            "milestones": rows, "missing": missing, "vllm_reported": reported,
            "launch_to_step1_start_s": next((r["since_launch_s"] for r in rows if r["key"] == "step1_start"), None)}


def _origin(lines: Sequence[Line], found: dict[str, dict[str, Any]],
            launched: datetime | None) -> tuple[datetime | None, str]:
    if found.get("launch", {}).get("at"):
        return found["launch"]["at"], "the train script's start (logtee launch line)"
    if launched:
        return launched, "--launched"
    for i in range(len(lines)):
        at, _ = line_time(lines, i)
        if at:
            return at, "the first timestamped line (no launch line: not the command's start)"
    return None, "no timestamped line"


def markdown(result: dict[str, Any]) -> str:
    """The breakdown as a Markdown table plus vLLM's reported durations and what could not be timed."""
    out = [f"Time 0: {result['origin']} ({result['origin_from']}). Launch to step 1 start: "
           f"{_fmt(result['launch_to_step1_start_s'])} s.", "",
           "| milestone | s since launch | s after previous | time from | printed by |", "|---|---:|---:|---|---|"]
    for r in result["milestones"]:
        out.append(f"| {r['label']} | {_fmt(r['since_launch_s'])} | {_fmt(r['after_previous_s'])} | "
                   f"{r['time_from']} | {r['source']} |")
    if result["vllm_reported"]:
        out += ["", "vLLM's own durations: " + ", ".join(f"{k} {v:g}" for k, v in result["vllm_reported"].items())]
    if result["missing"]:
        out += ["", "Not timed: " + "; ".join(f"{m['label']} ({m['why']})" for m in result["missing"])]
    return "\n".join(out) + "\n"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="the run's console log (LOG_DIR/<name>-<time>.log)")
    parser.add_argument("--samples", type=Path, help="our per-sample log (VERL_EXT_SAMPLE_LOG) of the same run")
    parser.add_argument("--launched", help="time 0 for a log without a launch line: 'YYYY-MM-DD HH:MM:SS'")
    parser.add_argument("--out", type=Path, help="JSON output (a .md table is written next to it)")
    args = parser.parse_args(argv)
    for flag, path in (("log", args.log), ("--samples", args.samples)):
        if path is not None and not path.is_file():
            parser.error(f"{flag} {path}: no such file")
    launched = None
    if args.launched:
        try:
            launched = datetime.fromisoformat(args.launched)
        except ValueError:
            parser.error(f"--launched {args.launched!r}: expected 'YYYY-MM-DD HH:MM:SS'")
    samples = sample_times(args.samples) if args.samples else None
    # split at newlines only: a progress bar's carriage returns stay inside the stamped line they belong to
    with args.log.open(errors="replace", newline="\n") as handle:
        result = breakdown(handle, samples, launched)
    text = markdown(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        args.out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
