"""The speed-diagnosis tools: the trace summary counts what a real torch profile holds, and the actor micro-batch
bench builds the batches it claims (token budget, packed position ids, padded masks) and runs on CPU."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
import torch

from bench_scripts import load_bench_script

trace_top = load_bench_script("trace_top")
actor_update_bench = load_bench_script("actor_update_bench")


def test_trace_top_totals_a_real_torch_trace(tmp_path):
    from torch.profiler import profile, record_function

    with profile() as prof:
        with record_function("micro_batch0"):
            for _ in range(3):
                torch.log_softmax(torch.randn(64, 32), dim=-1)
    plain = tmp_path / "trace.json"
    prof.export_chrome_trace(str(plain))
    packed = tmp_path / "trace.json.gz"
    with gzip.open(packed, "wt") as handle:
        handle.write(plain.read_text())

    events = trace_top.load_events(packed)
    totals = trace_top.totals_by_category(events)
    assert totals["cpu_op"]["aten::log_softmax"][1] == 3
    assert totals["user_annotation"]["micro_batch0"][1] == 1
    report = trace_top.render(packed, events, top=5)
    assert "| aten::log_softmax |" in report and "| micro_batch0 |" in report


def test_span_summary_separates_gpu_busy_time_from_cpu_issue_time():
    # a 10 ms region: two overlapping kernels (1.0-3.0 and 2.0-4.0 ms) and a copy (6.0-6.5 ms) keep the GPU busy
    # 3.5 ms; one sync waits 0.2 ms; work outside the region (a kernel at 20 ms) does not count
    def event(cat, name, ts_ms, dur_ms):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts_ms * 1000, "dur": dur_ms * 1000}

    events = [event("user_annotation", "actor_update", 0, 10), event("user_annotation", "actor_update", 50, 1),
              event("kernel", "gemm", 1, 2), event("kernel", "gemm", 2, 2), event("gpu_memcpy", "DtoH", 6, 0.5),
              event("kernel", "late", 20, 5), event("cpu_op", "aten::mm", 0.5, 0.1),
              event("cpu_op", "aten::item", 5, 0.3), event("cuda_runtime", "cudaLaunchKernel", 0.6, 0.01),
              event("cuda_runtime", "cudaLaunchKernel", 0.7, 0.01), event("cuda_runtime", "cudaStreamSynchronize", 5, 0.2)]
    summary = trace_top.span_summary(events, "actor_update")
    assert summary is not None
    assert summary["span_ms"] == 10 and abs(summary["gpu_busy_ms"] - 3.5) < 1e-9
    assert abs(summary["gpu_busy_share"] - 0.35) < 1e-9
    assert (summary["cpu_ops"], summary["kernel_launches"], summary["syncs"]) == (2, 2, 1)
    assert abs(summary["sync_wait_ms"] - 0.2) < 1e-9
    assert trace_top.span_summary(events, "update_weights") is None
    assert "GPU busy 3.5 ms (35 %)" in trace_top.render_span("actor_update", summary)
    assert "not in this trace" in trace_top.render_span("update_weights", None)


def test_micro_batch_lengths_fill_the_token_budget():
    lengths = actor_update_bench.sequence_lengths(16384, 150, 660, seed=0)
    assert sum(lengths) <= 16384 and sum(lengths) > 16384 - 660
    assert all(150 <= n <= 660 for n in lengths)


def test_packed_and_padded_batches_hold_the_same_tokens():
    lengths = [3, 5]
    packed = actor_update_bench.make_batch(lengths, packed=True, vocab=50, device=torch.device("cpu"))
    padded = actor_update_bench.make_batch(lengths, packed=False, vocab=50, device=torch.device("cpu"))
    assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert packed["input_ids"][0, :3].tolist() == padded["input_ids"][0, :3].tolist()
    assert packed["input_ids"][0, 3:].tolist() == padded["input_ids"][1].tolist()


def test_actor_update_bench_runs_each_variant_on_cpu(tmp_path, monkeypatch):
    from gloo_rank import free_port
    from verl_ext.tiny_model import build_qwen2, build_tokenizer

    monkeypatch.setenv("MASTER_PORT", free_port())  # for the one-process gloo group

    tokenizer_dir = build_tokenizer(tmp_path / "model", ["play a move"] * 20, vocab_size=300)
    model_dir = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir, dtype="float32")
    out = tmp_path / "bench.json"
    sys_argv = ["actor_update_bench.py", "--model", str(model_dir), "--device", "cpu", "--tokens", "96",
                "--min-len", "16", "--max-len", "40", "--warmup", "0", "--iters", "1",
                "--variants", "verl_default,padded,no_fsdp_bf16_padded,packed_varlen,packed_varlen_no_reshard,"
                "packed_varlen_root_only,unsharded_packed_varlen", "--profile", "padded",
                "--profile-out", str(tmp_path / "profile.txt"), "--out", str(out), "--check-varlen"]
    old_argv, sys.argv = sys.argv, sys_argv
    try:
        actor_update_bench.main()
    finally:
        sys.argv = old_argv
    summary = json.loads(out.read_text())
    results = summary["results"]
    assert [r["variant"] for r in results] == ["verl_default", "padded", "no_fsdp_bf16_padded", "packed_varlen",
                                            "packed_varlen_no_reshard", "packed_varlen_root_only",
                                            "unsharded_packed_varlen"]
    # the packed row under torch_varlen gives the padded rows' log-probs (bf16 model, SDPA per sequence on CPU)
    check = summary["varlen_check"]
    assert check["tokens"] <= 96 and check["max_abs_logprob_diff"] < 0.05
    assert all(r["error"] == "" and r["median_s"] > 0 and r["tokens"] <= 96 for r in results)
    ops = {r["variant"]: r["cpu_ops"] for r in results}
    assert all(count > 100 for count in ops.values())
    assert ops["packed_varlen_root_only"] < ops["packed_varlen"]  # one FSDP unit: no per-layer hooks
    assert ops["unsharded_packed_varlen"] < ops["packed_varlen_root_only"]  # no FSDP unit at all
    assert "Name" in (tmp_path / "profile.txt").read_text()


@pytest.mark.slow
def test_actor_update_bench_compiled_variant_reports_its_compilation(tmp_path, monkeypatch):
    # aot_eager: the compiled layers' graphs run op by op, no code generation (inductor is the GPU runs' backend)
    from gloo_rank import free_port
    from verl_ext.tiny_model import build_qwen2, build_tokenizer

    monkeypatch.setenv("MASTER_PORT", free_port())
    monkeypatch.setenv("VERL_EXT_COMPILE_BACKEND", "aot_eager")
    tokenizer_dir = build_tokenizer(tmp_path / "model", ["play a move"] * 20, vocab_size=300)
    model_dir = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir, dtype="float32")
    out = tmp_path / "bench.json"
    args = ["--model", str(model_dir), "--device", "cpu", "--tokens", "96", "--min-len", "16", "--max-len", "40",
            "--warmup", "1", "--iters", "2", "--variants", "packed_varlen_compiled", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["actor_update_bench.py", *args])
    actor_update_bench.main()
    (result,) = json.loads(out.read_text())["results"]
    assert result["error"] == "" and result["median_s"] > 0
    assert result["first_step_s"] > result["median_s"]  # the first step compiled the layers


import_cost = load_bench_script("import_cost")


def test_import_cost_times_fresh_interpreters_and_reports_a_missing_module(tmp_path):
    out = tmp_path / "imports.json"
    assert import_cost.main(["--modules", "json", "verl_ext_no_such_module", "--concurrency", "1", "2",
                             "--repeat", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["module"], r["concurrency"]) for r in rows] == [
        ("json", 1), ("json", 2), ("verl_ext_no_such_module", 1), ("verl_ext_no_such_module", 2)]
    timed = rows[1]
    assert len(timed["import_s"]) == 2 and all(0 <= s < timed["wall_s"] for s in timed["import_s"])
    assert "No module named 'verl_ext_no_such_module'" in rows[2]["error"] and "import_s" not in rows[2]
    table = out.with_suffix(".md").read_text()
    assert "| `json` |  | 2 | 1 |" in table and "failed: ModuleNotFoundError" in table


def test_root_only_variant_wraps_the_model_as_one_fsdp_unit(tmp_path, monkeypatch, tokenizer_dir):
    import torch.distributed as dist
    from gloo_rank import free_port
    from torch.distributed.fsdp import FSDPModule

    from verl_ext.tiny_model import build_qwen2

    model_dir = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir, dtype="float32")
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port(), "RANK": "0",
                        "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    dist.init_process_group("gloo")
    try:
        units = {}
        for wrap_layers in (True, False):
            model = actor_update_bench.build_model(str(model_dir), "fp32", "sdpa", True, True, 4,
                                                   torch.device("cpu"), wrap_layers=wrap_layers)
            layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
            units[wrap_layers] = sum(isinstance(m, FSDPModule) for m in model.modules())
            assert isinstance(model, FSDPModule) and layers
            assert all(isinstance(m, FSDPModule) == wrap_layers for m in layers)
        assert units[False] == 1 and units[True] > 1
    finally:
        dist.destroy_process_group()
