"""bench/learning/clip_share.py: how much of each GRPO step PPO's clip touched, per run and per kind of update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

clip = load_bench_script("clip_share")


def write_metrics(path: Path, rows: list[dict[str, float]]) -> Path:
    """A verl file-logger JSONL: ``rows`` as steps 1..n (a validation row at step 0 without actor metrics)."""
    lines = [json.dumps({"step": 0, "data": {"val-core/x/reward/mean@1": 0.5}})]
    lines += [json.dumps({"step": step, "data": row}) for step, row in enumerate(rows, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_on_policy_and_pass_runs_are_told_apart_and_summed(tmp_path, capsys):
    """A run that skipped the old-log-prob pass (entropy_estimate, no entropy) and clipped nothing, beside one whose
    pass ran and clipped a little: the table names both, the summary counts steps and clipped runs per kind."""
    on_policy = write_metrics(tmp_path / "on.metrics.jsonl", [
        {"actor/pg_clipfrac": 0.0, "actor/pg_clipfrac_lower": 0.0, "actor/entropy_estimate": 0.1}] * 3)
    with_pass = write_metrics(tmp_path / "pass.metrics.jsonl", [
        {"actor/pg_clipfrac": 0.01, "actor/pg_clipfrac_lower": 0.0, "actor/entropy": 0.5},
        {"actor/pg_clipfrac": 0.03, "actor/pg_clipfrac_lower": 0.001, "actor/entropy": 0.4}])
    sft = tmp_path / "sft.metrics.jsonl"
    sft.write_text(json.dumps({"step": 1, "data": {"train/loss": 1.0}}) + "\n")

    assert clip.main([str(on_policy), str(with_pass), str(sft), "--out", str(tmp_path / "share")]) == 0
    printed = capsys.readouterr().out
    assert "| 3 | skipped | 0.0000 | 0.00000 | 0.0000 |" in printed
    assert "| 2 | ran | 0.0300 | 0.02000 | 0.0010 |" in printed
    assert "sft.metrics.jsonl" not in printed  # logs no clip fraction: not a GRPO run
    assert ("- old log-probs from the update (on-policy, the default): 1 runs, 3 steps; 0 runs clipped any token; "
            "largest clip fraction of a step 0.0000") in printed
    assert "- verl's old-log-prob pass: 1 runs, 2 steps; 1 runs clipped any token; largest clip fraction of a step " \
        "0.0300" in printed
    saved = json.loads((tmp_path / "share.json").read_text())
    assert [row["old_log_prob_pass"] for row in saved["runs"]] == [False, True]
    assert (tmp_path / "share.md").read_text() == printed


@pytest.mark.parametrize("content, message", [
    (None, "no such metrics file"),
    ('{"step": 1, "data": {"train/loss": 1.0}}\n', "none of the files logs actor/pg_clipfrac"),
    ('not json\n{"step": 1, "data": {"actor/pg_clipfrac": 0.0}}\n', "bad.metrics.jsonl:1: not a JSON line"),
])
def test_bad_input_exits_2_naming_what_is_wrong(tmp_path, capsys, content, message):
    path = tmp_path / "bad.metrics.jsonl"
    if content is not None:
        path.write_text(content)
    assert clip.main([str(path)]) == 2
    assert message in capsys.readouterr().err
