"""bench/micro/fused_logprob_bench.py on the CPU: verl's torch fused log-prob function against the exact log-softmax (over
every position, and at the response positions only), and the Triton backend (CUDA only) reported as an error instead of ending the run. The Triton timings are a GPU run's
(docs/runs/2026-11-25-h100-triton/NOTES.md, section 0h)."""

from __future__ import annotations

import json

import pytest

from bench_scripts import load_bench_script

fused_logprob_bench = load_bench_script("fused_logprob_bench")
SMALL = ["--device", "cpu", "--hidden", "128", "--vocab", "1000", "--warmup", "0", "--iters", "1"]


def test_torch_backend_matches_the_exact_log_softmax_in_fp32(tmp_path):
    out = tmp_path / "fused.json"
    # 1100 tokens: two full 512-token chunks and a partial one, all checked against the exact values
    results = fused_logprob_bench.main([*SMALL, "--dtype", "fp32", "--backends", "torch", "--tokens", "1100",
                                        "--check-tokens", "1100", "--out", str(out)])
    (torch_result,) = results
    assert torch_result.error == ""
    assert torch_result.logprob_max_abs_err < 1e-4 and torch_result.grad_max_rel_err < 1e-4
    assert torch_result.forward_s > 0 and torch_result.forward_backward_s >= torch_result.forward_s
    report = json.loads(out.read_text())
    assert report["vocab"] == 1000 and report["results"][0]["tokens"] == 1100


def test_head_at_the_responses_matches_the_exact_log_softmax_where_the_loss_reads(tmp_path):
    # 20:10 sequences over 1105 tokens: the loss reads 365 positions; verl's head runs on those rows only
    results = fused_logprob_bench.main([*SMALL, "--dtype", "fp32", "--backends", "torch,torch-responses",
                                        "--tokens", "1105", "--layout", "20:10", "--check-tokens", "1105",
                                        "--out", str(tmp_path / "fused.json")])
    for result in results:
        assert result.error == "", result
        assert result.logprob_max_abs_err < 1e-4 and result.grad_max_rel_err < 1e-4
    mask = fused_logprob_bench.response_mask(1105, 20, 10, fused_logprob_bench.torch.device("cpu"))
    assert int(mask.sum()) == 36 * 10 + 5  # 36 whole sequences, then 20 prompt and 5 response tokens


def test_a_backend_that_cannot_run_here_is_reported_and_the_rest_still_run(tmp_path):
    results = fused_logprob_bench.main([*SMALL, "--tokens", "64", "--layout", "16:16",
                                        "--out", str(tmp_path / "fused.json")])
    by_backend = {r.backend: r for r in results}
    assert by_backend["torch"].error == "" and by_backend["torch"].logprob_max_abs_err < 0.05  # bf16 logits
    assert by_backend["triton"].error  # verl's Triton kernel needs CUDA
    assert json.loads((tmp_path / "fused.json").read_text())["results"][1]["error"] == by_backend["triton"].error


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--backends", "torch,liger", "--backends: unknown ['liger']"),
    ("--tokens", "16k", "--tokens: expected comma-separated integers, got '16k'"),
    ("--tokens", "0", "--tokens: each budget must be a positive integer"),
    ("--layout", "145", "--layout: expected PROMPT:RESPONSE, two positive integers, got '145'"),
    ("--layout", "145:0", "--layout: expected PROMPT:RESPONSE, two positive integers, got '145:0'"),
    ("--tokens", "145", "--tokens: each budget must hold one prompt of --layout 145:60 and a response token"),
])  # fmt: skip
def test_bad_flags_are_named(flag, value, message, capsys):
    with pytest.raises(SystemExit):
        fused_logprob_bench.parse_args([flag, value])
    assert message in capsys.readouterr().err
