"""bench/speed/vllm_offline.py without vLLM: arguments, the prompts it builds, and the timing/report path (fake LLM)."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import pytest

from verl_ext.export import build_rows, write_parquet
from verl_ext.mixture import EnvMixture

from bench_scripts import load_bench_script

vllm_offline = load_bench_script("vllm_offline")


@pytest.fixture(scope="module")
def workload(tmp_path_factory, tokenizer_dir):
    """A model folder (the test tokenizer + a qwen2 config) and an export of 16 tic_tac_toe/connect_four rows."""
    root = tmp_path_factory.mktemp("offline")
    model = root / "model"
    shutil.copytree(tokenizer_dir, model)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 8}})
    rows, _ = build_rows(mixture, "train", "rl", progress=False)
    write_parquet(rows, root / "train.parquet")
    return model, root / "train.parquet", rows


def args_for(model: Path, data: Path, out: Path, *extra: str):
    return vllm_offline.parse_args(["--model", str(model), "--data", str(data), "--out", str(out), *extra])


def test_defaults_mirror_verls_rollout_and_leave_scheduling_to_vllm(tmp_path):
    args = args_for(tmp_path / "m", tmp_path / "d.parquet", tmp_path / "o.json")
    engine = vllm_offline.engine_kwargs(args)
    assert engine["compilation_config"] == {"cudagraph_mode": "FULL_AND_PIECEWISE"} and not engine["enforce_eager"]
    assert engine["gpu_memory_utilization"] == 0.4 and engine["dtype"] == "bfloat16"
    assert engine["enable_prefix_caching"] is True and engine["enable_chunked_prefill"] is True
    assert "max_num_seqs" not in engine and "max_num_batched_tokens" not in engine
    assert vllm_offline.sampling_kwargs(args) == {"n": 8, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                                  "max_tokens": 512, "logprobs": None, "repetition_penalty": 1.0}
    verl_like = args_for(tmp_path / "m", tmp_path / "d.parquet", tmp_path / "o.json", "--max-num-seqs", "256",
                         "--max-num-batched-tokens", "8192", "--enforce-eager", "--fanout", "requests",
                         "--logprobs", "--engine-arg", "async_scheduling=true",
                         "--engine-arg", "performance_mode=throughput")
    engine = vllm_offline.engine_kwargs(verl_like)
    assert engine["max_num_seqs"] == 256 and engine["max_num_batched_tokens"] == 8192
    assert engine["async_scheduling"] is True and engine["performance_mode"] == "throughput"
    assert engine["enforce_eager"] is True and "compilation_config" not in engine
    sampling = vllm_offline.sampling_kwargs(verl_like)
    assert sampling["n"] == 1 and sampling["logprobs"] == 0
    assert vllm_offline.sampling_kwargs(args_for(tmp_path / "m", tmp_path / "d.parquet", tmp_path / "o.json",
                                                 "--no-logprobs"))["logprobs"] is None


@pytest.mark.parametrize("flags, message", [
    (["--prompts", "0"], "--prompts=0: must be a positive integer"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization=1.5: must be in"),
    (["--engine-arg", "no_equals_sign"], "--engine-arg 'no_equals_sign': expected KEY=VALUE"),
    (["--fanout", "both"], "invalid choice: 'both'"),
])
def test_bad_arguments_name_the_flag(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit):
        args_for(tmp_path / "m", tmp_path / "d.parquet", tmp_path / "o.json", *flags)
    assert message in capsys.readouterr().err


def test_prompts_are_the_exports_chat_prompts_as_verl_tokenizes_them(workload):
    from transformers import AutoTokenizer

    model, data, rows = workload
    tokenizer = AutoTokenizer.from_pretrained(model)  # what verl loads for the model (its config picks the class)
    messages = vllm_offline.load_messages(data, 6, seed=3)
    assert messages == vllm_offline.load_messages(data, 6, seed=3) and len(messages) == 6
    assert all(m in [r["prompt"] for r in rows] for m in messages)
    assert all(len(m) == 1 and m[0]["role"] == "user" and m[0]["content"].startswith("You are playing ")
               for m in messages)
    ids = vllm_offline.prompt_token_ids(model, messages)
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    assert ids == [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    assert tokenizer.decode(ids[0]).endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="--prompts=17: .* holds only 16 rows"):
        vllm_offline.load_messages(data, 17, seed=0)


class FakeCompletion:
    def __init__(self, tokens: int, finish: str) -> None:
        self.token_ids, self.finish_reason = list(range(tokens)), finish


class FakeLLM:
    """Answers like vllm.LLM: one RequestOutput per prompt with ``n`` completions; each call takes 2 s."""

    instances: list[FakeLLM] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.calls = kwargs, []
        self.start_method = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling, use_tqdm=True):
        self.calls.append((prompts, sampling))
        CLOCK.now += 2.0
        lengths = iter(range(1, 10_000))
        return [types.SimpleNamespace(outputs=[FakeCompletion(next(lengths) % 7 + 1, "stop" if i else "length")
                                               for i in range(sampling.n)]) for _ in prompts]


class FakeSamplingParams:
    def __init__(self, **kwargs) -> None:
        self.__dict__.update(kwargs)


CLOCK = types.SimpleNamespace(now=100.0)


@pytest.mark.parametrize("fanout", ["n", "requests"])
def test_run_times_the_generate_calls_and_reports_the_steady_state(workload, tmp_path, fanout, monkeypatch):
    model, data, _ = workload
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    args = args_for(model, data, tmp_path / "o.json", "--prompts", "4", "--samples", "3", "--max-tokens", "7",
                    "--fanout", fanout, "--max-num-seqs", "256")
    fake = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams, __version__="0.24.0-fake")
    result = vllm_offline.run(args, vllm=fake, clock=lambda: CLOCK.now)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["max_num_seqs"] == 256 and llm.kwargs["model"] == str(model)
    assert llm.start_method == "spawn"  # the engine core must not be forked after CUDA was initialised
    prompts, sampling = llm.calls[0]
    assert len(llm.calls) == 3 and len(prompts) == (4 if fanout == "n" else 12)
    assert sampling.n == (3 if fanout == "n" else 1) and sampling.max_tokens == 7
    assert result["completions_per_call"] == 12 and result["vllm_version"] == "0.24.0-fake"
    assert result["device"] == vllm_offline.device_name() != ""
    assert result["engine_start_s"] == 0.0 and result["import_s"] == 0.0
    tokens = result["runs"][0]["generated_tokens"]
    assert result["generation_s"] == 2.0 and result["tokens_per_s"] == pytest.approx(tokens / 2.0)
    assert result["runs"][0]["completions"] == 12 and result["runs"][0]["finished_by_length"] == len(prompts)
    assert result["medians_over"] == "calls 2..N"
    json.dumps(result)  # what main() writes


def test_a_short_answer_is_an_error_not_a_faster_run(workload, tmp_path):
    model, data, _ = workload
    args = args_for(model, data, tmp_path / "o.json", "--prompts", "2", "--samples", "2", "--repeats", "1")
    ids = [[1, 2], [3]]
    runs = [{"wall_s": 1.0, "completions": 3, "generated_tokens": 9, "tokens_per_s": 9.0, "mean_tokens": 3.0,
             "finished_by_length": 0}]
    with pytest.raises(RuntimeError, match="generate calls \\[1\\] returned a completion count other than"):
        vllm_offline.report(args, ids, runs, 1.0, 2.0, "x")
