"""Start-up breakdown from a console log: a synthetic log made of the exact messages verl 0.9.1, vLLM 0.24.0 and
Ray 2.60.0 print (with Ray's actor prefixes and colour codes), the committed H100 excerpt, and the log stamper."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from verl_ext.launch import logtee
from verl_ext.runlog import read_console_log

from bench_scripts import load_bench_script

startup = load_bench_script("startup_breakdown")
REPO = Path(__file__).resolve().parents[1]
TASK = "\x1b[36m(TaskRunnerV1 pid=812)\x1b[0m "
SERVER = "\x1b[36m(vLLMHttpServer pid=1500)\x1b[0m "
ENGINE = SERVER + "(EngineCore pid=1600) "

# (stamp the log file would carry, line as the console shows it)
SYNTHETIC = [
    ("2026-11-23 11:29:16.000", "[verl-ext] launch: train script started"),
    ("2026-11-23 11:29:17.000", "[verl-ext] launch: command started"),
    ("2026-11-23 11:29:22.400", "[verl-ext] launch: pre-flight done in process, starting verl"),
    ("2026-11-23 11:29:30.100", "ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {}}}"),
    ("2026-11-23 11:29:33.000", "[verl-ext] vLLM model info: Qwen2ForCausalLM: cached (4.1 s); 16.9 s"),
    ("2026-11-23 11:29:35.200", "2026-11-23 11:29:35,101\tINFO worker.py:2038 -- Started a local Ray instance."),
    ("2026-11-23 11:29:45.000", TASK + "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.FSDPActorConfig',"),
    ("2026-11-23 11:29:55.000", TASK + "Using dataset class: DynamicEnvDataset"),
    ("2026-11-23 11:29:58.300", TASK + "INFO:2026-11-23 11:29:58,250:create worker group dict_keys(['actor_rollout'])"),
    ("2026-11-23 11:30:40.100", TASK + "INFO:2026-11-23 11:30:40,000:actor and ref model engine initialized"),
    ("2026-11-23 11:30:44.100", TASK + "INFO:2026-11-23 11:30:44,000:reward loop manager initialized"),
    ("2026-11-23 11:30:45.600", SERVER + "INFO:2026-11-23 11:30:45,500:vLLMHttpServer, replica_rank: 0, node_rank: 0, "
     "CUDA_VISIBLE_DEVICES: 0, master_address: 10.0.0.1, master_port: 4000, data_parallel_rpc_port: 4001, "
     "data_parallel_master_port: 4002"),
    ("2026-11-23 11:30:46.000", SERVER + "INFO 11-23 11:30:46 [model.py:598] Resolved architecture: Qwen2ForCausalLM"),
    ("2026-11-23 11:30:55.900", ENGINE + "INFO 11-23 11:30:55 [core.py:115] Initializing a V1 LLM engine (v0.24.0) "
     "with config: model='/tmp/qwen2.5-0.5b-random', speculative_config=None"),
    # printed by the worker process before Ray's prefix knows it (then `(Worker pid=N)` lines follow)
    ("2026-11-23 11:31:03.100", SERVER + "INFO 11-23 11:31:03 [worker_base.py:282] Injected <class "
     "'verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension'> into <class "
     "'vllm.v1.worker.gpu_worker.Worker'> for extended collective_rpc calls ['get_zmq_handle']"),
    ("2026-11-23 11:31:03.200", SERVER + "(Worker pid=1700) INFO 11-23 11:31:03 [parallel_state.py:1588] "
     "world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:58297 backend=nccl"),
    ("2026-11-23 11:31:05.900", ENGINE + "INFO 11-23 11:31:05 [gpu_model_runner.py:5256] Model loading took "
     "0.93 GiB memory and 1.234567 seconds"),
    ("2026-11-23 11:31:30.900", ENGINE + "INFO 11-23 11:31:30 [monitor.py:34] torch.compile took 20.51 s in total"),
    ("2026-11-23 11:31:33.900", ENGINE + "INFO 11-23 11:31:33 [kv_cache_utils.py:2146] GPU KV cache size: "
     "1,234,567 tokens"),
    ("2026-11-23 11:31:34.000", ENGINE + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|####| 51/51"),
    ("2026-11-23 11:31:52.900", ENGINE + "INFO 11-23 11:31:52 [gpu_model_runner.py:6657] Graph capturing finished "
     "in 18 secs, took 0.42 GiB"),
    ("2026-11-23 11:31:53.900", ENGINE + "INFO 11-23 11:31:53 [core.py:345] init engine (profile, create kv cache, "
     "warmup model) took 47.80 s (compilation: 20.51 s)"),
    ("2026-11-23 11:32:00.200", SERVER + "INFO:2026-11-23 11:32:00,100:Initializing a V1 LLM engine with config: "
     "model='/tmp/qwen2.5-0.5b-random'"),
    ("2026-11-23 11:32:01.100", TASK + "INFO:2026-11-23 11:32:01,000:checkpoint engine manager initialized"),
    ("2026-11-23 11:32:03.100", TASK + "INFO:2026-11-23 11:32:03,000:all initialize finished, ready to fit"),
    ("2026-11-23 11:32:24.700", "\x1b[36m(AgentLoopWorkerTQ pid=1900)\x1b[0m Using dataset class: DynamicEnvDataset"),
    ("2026-11-23 11:32:29.900", "\x1b[36m(AgentLoopWorkerTQ pid=1907)\x1b[0m Using dataset class: DynamicEnvDataset"
     "\x1b[32m [repeated 7x across cluster]\x1b[0m"),
    ("2026-11-23 11:33:58.500", TASK + "('Initial validation metrics: {\\'val-core/openspiel/tic_tac_toe/reward/"
     "mean@1\\': 0.87, '"),
    ("2026-11-23 11:33:58.500", TASK + " '\\'val-aux/num_turns/mean\\': 2.0}')"),
    ("2026-11-23 11:34:14.600", TASK + "step:1 - global_seqlen/min:158370.0 - timing_s/gen:6.11 - "
     "timing_s/step:12.5 - perf/total_num_tokens:158370"),
]


def stamped(lines=SYNTHETIC) -> list[str]:
    return [f"{at} | {text}\n" for at, text in lines]


def by_key(result: dict) -> dict[str, dict]:
    return {row["key"]: row for row in result["milestones"]}


def test_every_milestone_is_timed_from_the_exact_messages():
    samples = {"first_val_reward": datetime(2026, 11, 23, 11, 33, 56, 696000),
               "first_train_reward": datetime(2026, 11, 23, 11, 34, 2, 800000)}
    result = startup.breakdown(stamped(), samples)
    rows = by_key(result)
    assert result["origin"] == "2026-11-23 11:29:16"  # a serial run: TransferQueue prints no ready line of its own
    ready = next(m for m in startup.MILESTONES if m.key == "transfer_queue_ready")
    assert result["missing"] == [{"key": ready.key, "label": ready.label, "why": "not found"}]
    assert [r["key"] for r in result["milestones"]] == [m.key for m in startup.MILESTONES
                                                        if m.key != "transfer_queue_ready"]
    assert rows["ray"]["since_launch_s"] == pytest.approx(19.101)  # Ray's own time, not the log stamp
    assert rows["command"]["since_launch_s"] == pytest.approx(1.0)
    assert rows["preflight"]["since_launch_s"] == pytest.approx(6.4)
    assert rows["ray_init"]["after_previous_s"] == pytest.approx(7.7)
    assert rows["transfer_queue"]["after_previous_s"] == pytest.approx(10.0)  # after the TaskRunner's config print
    assert rows["actor_init"]["since_launch_s"] == pytest.approx(84.0)
    assert rows["vllm_model_info"]["since_launch_s"] == pytest.approx(17.0)
    assert rows["vllm_architecture"]["after_previous_s"] == pytest.approx(0.5)  # model info cached: no gap
    assert rows["vllm_engine_start"]["since_launch_s"] == 99.0  # vLLM: seconds, the year from its neighbours
    assert rows["vllm_engine_start"]["time_from"] == "own timestamp (s, year inferred)"
    assert rows["vllm_worker"]["after_previous_s"] == 8.0  # the worker process's spawn and imports
    assert rows["vllm_weights"]["after_previous_s"] == 2.0
    assert rows["vllm_graphs"]["after_previous_s"] == pytest.approx(18.0)  # after the capture bar began
    assert rows["ready_to_fit"]["since_launch_s"] == pytest.approx(167.0)
    # the first agent-loop worker's constructor line, not the TaskRunner's earlier one nor Ray's repeat summary
    assert rows["agent_loop_worker"]["after_previous_s"] == pytest.approx(21.7)
    assert rows["validation_done"]["time_from"] == "log stamp"  # pprint carries no time: the stamp times it
    assert rows["validation_done"]["since_launch_s"] == pytest.approx(282.5)
    assert rows["step1_start"]["since_launch_s"] == pytest.approx(298.6 - 12.5)
    assert result["launch_to_step1_start_s"] == pytest.approx(286.1)
    assert rows["first_val_reward"]["since_launch_s"] == pytest.approx(280.696)
    assert result["vllm_reported"] == {"vllm_weights_load_s": 1.234567, "vllm_torch_compile_s": 20.51,
                                       "vllm_graph_capture_s": 18.0, "vllm_engine_init_s": 47.8}
    text = startup.markdown(result)
    assert "| vLLM CUDA graph capture done | 156.0 | 18.0 | own timestamp (s, year inferred) |" in text
    assert "Launch to step 1 start: 286.1 s." in text


def test_the_task_runner_in_the_driver_is_timed_from_its_unprefixed_lines():
    """TASK_RUNNER=driver: verl's TaskRunner prints from the driver process, so its lines carry no actor prefix."""
    driver = [(at, text.replace(TASK, "")) for at, text in SYNTHETIC]
    config = next(i for i, (_, text) in enumerate(SYNTHETIC) if text.startswith(TASK + "{'actor_rollout_ref'"))
    driver[config] = ("2026-11-23 11:29:36.500", driver[config][1])  # no new process: right after Ray
    rows = by_key(startup.breakdown(stamped(driver)))
    assert rows["task_runner"]["after_previous_s"] == pytest.approx(1.399)
    assert rows["transfer_queue"]["since_launch_s"] == pytest.approx(39.0)
    # the agent-loop workers are still Ray actors: their constructor line, not the driver's own
    assert rows["agent_loop_worker"]["since_launch_s"] == pytest.approx(188.7)


def test_transfer_queue_started_beside_the_trainer_is_timed_where_it_became_ready():
    """TRANSFER_QUEUE_START=overlap: the runner is our subclass (its own actor prefix), the datasets are built
    while TransferQueue starts, and its ready line lands among the trainer's later milestones."""
    runner = "\x1b[36m(OverlappedTaskRunner pid=812)\x1b[0m "
    overlapped = [(at, text.replace(TASK, runner)) for at, text in SYNTHETIC]
    overlapped.insert(8, ("2026-11-23 11:30:01.000", runner + "[verl-ext] launch: TransferQueue ready after 16.0 s"))
    rows = by_key(startup.breakdown(stamped(overlapped)))
    assert rows["task_runner"]["since_launch_s"] == pytest.approx(29.0)
    keys = list(rows)
    assert keys.index("worker_group") + 1 == keys.index("transfer_queue_ready") < keys.index("actor_init")
    assert rows["transfer_queue_ready"]["after_previous_s"] == pytest.approx(2.75)


def test_an_unstamped_log_times_what_carries_its_own_time_and_says_what_does_not():
    result = startup.breakdown([text + "\n" for _, text in SYNTHETIC[1:]])
    rows = by_key(result)
    assert result["origin_from"].startswith("the first timestamped line")
    assert rows["ray"]["since_launch_s"] == 0.0 and rows["ready_to_fit"]["since_launch_s"] == pytest.approx(147.899)
    missing = {m["key"]: m["why"] for m in result["missing"]}
    assert missing["validation_done"] == "no time on its line" and missing["step1_end"] == "no time on its line"
    assert missing["ray_init"] == missing["task_runner"] == "no time on its line"
    assert missing["launch"] == "not found" and result["launch_to_step1_start_s"] is None


def test_the_committed_h100_excerpt():
    log = REPO / "docs" / "runs" / "2026-11-22-h100-grpo-smoke" / "train_log_excerpt.txt"
    samples = startup.sample_times(log.with_name("samples_train.jsonl"))
    with log.open() as handle:
        result = startup.breakdown(handle, samples, launched=datetime(2026, 11, 22, 18, 34, 0))
    rows = by_key(result)
    assert rows["ray"]["since_launch_s"] == pytest.approx(19.499)
    assert rows["ready_to_fit"]["since_launch_s"] == pytest.approx(224.71)  # 18:37:44,710
    assert set(rows) == {"ray", "ready_to_fit", "first_train_reward"}
    assert rows["first_train_reward"]["after_previous_s"] > 0


def test_stamper_keeps_the_console_and_stamps_every_line_of_the_file():
    console, log = io.BytesIO(), io.BytesIO()
    clock = iter([1795433351.0, 1795433356.25, 1795433357.5, 1795433358.0])
    tee = logtee.StampedTee(console, log, clock=lambda: next(clock))
    tee.header(1795433350.0)
    preflight_done = log.getvalue().decode().split("\n")[1]
    assert preflight_done == logtee.stamp(1795433351.0).decode() + logtee.COMMAND_MARK
    log.seek(0)
    log.truncate()
    log.write(logtee.stamp(1795433350.0) + logtee.LAUNCH_MARK.encode() + b"\n")
    for chunk in (b"first line\nsecond ", b"half\nprogress 1/3\rprogress 3/3\n", b"tail without newline"):
        tee.write(chunk)
    assert console.getvalue() == b"first line\nsecond half\nprogress 1/3\rprogress 3/3\ntail without newline"
    lines = log.getvalue().decode().split("\n")
    assert lines[0].endswith(" | " + logtee.LAUNCH_MARK)
    assert [line.split(" | ", 1)[1] for line in lines] == [
        logtee.LAUNCH_MARK, "first line", "second half", "progress 1/3\rprogress 3/3", "tail without newline"]
    assert lines[1][:23] == logtee.stamp(1795433356.25).decode()[:23]
    assert lines[2][:23] == lines[1][:23]  # "second " arrived with the first chunk
    assert lines[3][:23] == logtee.stamp(1795433357.5).decode()[:23]
    with pytest.raises(ValueError, match="--started: expected epoch seconds"):
        logtee.parse_epoch("yesterday")
    assert logtee.parse_epoch("1795433350,125") == 1795433350.125  # $EPOCHREALTIME in a comma locale


def test_stamper_as_the_train_scripts_run_it_feeds_the_breakdown(tmp_path):
    log = tmp_path / "run.log"
    text = "".join(t + "\n" for _, t in SYNTHETIC[2:])  # the tee writes the launch and command lines itself
    done = subprocess.run([sys.executable, "-u", str(REPO / "verl_ext" / "launch" / "logtee.py"), "--started",
                           "1795433356.5", str(log)], input=text.encode(), capture_output=True, check=True)
    assert done.stdout.decode() == text
    out = tmp_path / "startup.json"
    assert startup.main([str(log), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["origin_from"] == "the train script's start (logtee launch line)"
    rows = by_key(result)
    assert rows["step1_end"]["time_from"] == "log stamp" and "step1_start" in rows
    assert rows["command"]["time_from"] == rows["preflight"]["time_from"] == "log stamp"
    assert out.with_suffix(".md").read_text().startswith("Time 0: ")
    assert read_console_log(log)[1]["timing_s/step"] == 12.5  # verl-ext plot/summaries still read stamped logs


def test_cli_names_a_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        startup.main([str(tmp_path / "nope.log")])
    assert "nope.log: no such file" in capsys.readouterr().err


def test_docs_list_every_pattern():
    docs = (REPO / "docs" / "runs" / "speed-lab-notes" / "4-startup-breakdown.md").read_text()
    assert all(f"| {m.label} |" in docs for m in startup.MILESTONES)


def test_the_committed_h200_excerpt_without_vllm_info_lines(tmp_path):
    """vLLM logged no INFO lines in that run: its loading bar, graph-capture bar and verl's server list time it."""
    log = REPO / "docs" / "runs" / "2026-11-23-h200-learning" / "grpo_log_excerpt.txt"
    with log.open(newline="\n") as handle:
        rows = by_key(startup.breakdown(handle))
    assert rows["launch"]["since_launch_s"] == 0.0
    assert rows["vllm_server"]["since_launch_s"] == pytest.approx(143.593)
    assert rows["vllm_weights"]["since_launch_s"] == pytest.approx(195.889)
    assert rows["vllm_graphs_start"]["since_launch_s"] == pytest.approx(215.293)
    assert rows["vllm_server_ready"]["since_launch_s"] == pytest.approx(221.007)
    assert rows["step1_start"]["since_launch_s"] == pytest.approx(253.2, abs=0.1)
    # a progress bar echoed after a carriage return carries no stamp: the stamped copy is the one timed
    bar = "Loading safetensors checkpoint shards: 100% Completed | 1/1"
    lines = ["2026-11-23 13:30:00.000 | [verl-ext] launch: train script started\n",
             f"2026-11-23 13:30:10.000 | (Worker pid=1) {bar.replace('100%', '0%')}\r(Worker pid=1) {bar}\n",
             f"{bar}\n"]
    path = tmp_path / "bars.log"
    path.write_text("".join(lines))
    with path.open(newline="\n") as handle:
        assert by_key(startup.breakdown(handle))["vllm_weights"]["since_launch_s"] == pytest.approx(10.0)
