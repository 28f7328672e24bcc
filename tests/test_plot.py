"""`verl-ext plot` renders training curves from recorded run logs (verl metrics + our sample log)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from verl_ext.plot import main as plot_main
from verl_ext.runlog import read_metrics, read_runs

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "docs" / "runs" / "2026-11-22-h100-grpo-smoke"


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_grpo_curves_from_a_recorded_h100_run(tmp_path):
    """The smoke run's own metrics and sample log (5 steps, 64 samples a step, blank model: reward 0)."""
    assert plot_main([str(SMOKE / "metrics_train.jsonl"), "--out", str(tmp_path), "--smooth", "2"]) == 0
    curves = json.loads((tmp_path / "grpo_curves.json").read_text())
    panels = curves["panels"]
    assert curves["kind"] == "grpo"
    assert [step for step, _ in panels["reward (mean)"]["lines"]["train (sampled)"]] == [1, 2, 3, 4, 5]
    assert all(value == 0.0 for _, value in panels["legal-move rate"]["lines"]["train (sampled)"])
    assert panels["step time (s)"]["lines"]["step"][0][1] > panels["step time (s)"]["lines"]["step"][1][1]
    assert (tmp_path / "grpo_curves.png").stat().st_size > 20_000


def test_resumed_runs_and_held_out_markers(tmp_path):
    """Two files in order (a resume), verl's validation metrics per data source, our per-sample log beside."""
    first = _write_jsonl(tmp_path / "run1.metrics.jsonl", [
        {"step": 0, "data": {"val-core/openspiel/tic_tac_toe/reward/mean@1": 0.5,
                             "val-aux/openspiel/tic_tac_toe/valid/mean@1": 0.8}},
        {"step": 1, "data": {"critic/score/mean": 0.40, "response_length/mean": 8.0}},
        {"step": 2, "data": {"critic/score/mean": 0.50, "response_length/mean": 8.0}},
    ])
    second = _write_jsonl(tmp_path / "run2.metrics.jsonl", [
        {"step": 2, "data": {"critic/score/mean": 0.55, "response_length/mean": 7.0}},
        {"step": 3, "data": {"critic/score/mean": 0.70, "response_length/mean": 7.0,
                             "val-core/openspiel/tic_tac_toe/reward/mean@1": 0.75,
                             "val-aux/openspiel/tic_tac_toe/valid/mean@1": 0.95}},
    ])
    samples = [{"time": t, "split": "train", "score": 1.0, "valid": float(t % 2), "format_ok": 1.0,
                "task_score": 0.5} for t in range(4)]
    _write_jsonl(tmp_path / "run2.samples.jsonl", samples + [{"time": 9, "split": "val", "score": 0.0}])
    metrics, per_step = read_runs([first, second])
    assert metrics[2]["critic/score/mean"] == 0.55  # the resumed run replaces the step it redid
    assert per_step[2]["legal_rate"] == 0.5 and per_step[3]["task_score"] == 0.5  # val lines are not training

    assert plot_main([str(first), str(second), "--out", str(tmp_path / "plots"), "--name", "run"]) == 0
    panels = json.loads((tmp_path / "plots" / "run_curves.json").read_text())["panels"]
    assert panels["reward (mean)"]["lines"]["train (sampled)"] == [[1, 0.4], [2, 0.55], [3, 0.7]]
    assert panels["reward (mean)"]["markers"]["held-out openspiel/tic_tac_toe (greedy)"] == [[0, 0.5], [3, 0.75]]
    assert panels["legal-move rate"]["markers"]["held-out openspiel/tic_tac_toe (greedy)"] == [[0, 0.8], [3, 0.95]]


def test_sft_curves_merge_train_and_validation_records_of_a_step(tmp_path):
    metrics = _write_jsonl(tmp_path / "sft.metrics.jsonl", [
        {"step": 1, "data": {"train/loss": 3.0, "train/lr": 1e-4, "train/grad_norm": 2.0}},
        {"step": 2, "data": {"train/loss": 2.0, "train/lr": 1e-3, "train/grad_norm": 1.0}},
        {"step": 2, "data": {"val/loss": 2.2}},
    ])
    with metrics.open("a") as handle:
        handle.write('{"step": 3, "data": {"train/lo')  # a run killed mid-write
    assert read_metrics(metrics)[2] == {"train/loss": 2.0, "train/lr": 1e-3, "train/grad_norm": 1.0, "val/loss": 2.2}
    assert plot_main([str(metrics), "--out", str(tmp_path)]) == 0
    panels = json.loads((tmp_path / "sft_curves.json").read_text())["panels"]
    assert panels["loss"]["lines"]["train"] == [[1, 3.0], [2, 2.0]] and panels["loss"]["markers"]["validation"] == [[2, 2.2]]


def test_bad_input_is_named(tmp_path, capsys):
    assert plot_main([str(tmp_path / "none.jsonl"), "--out", str(tmp_path)]) == 2
    assert "no such metrics file" in capsys.readouterr().err
    broken = tmp_path / "broken.metrics.jsonl"
    broken.write_text('{"step": 1, "data": {}}\nnot json\n{"step": 2, "data": {}}\n')
    assert plot_main([str(broken), "--out", str(tmp_path)]) == 2
    assert "broken.metrics.jsonl:2: not a JSON line" in capsys.readouterr().err
    copy = shutil.copy(SMOKE / "metrics_train.jsonl", tmp_path / "m.metrics.jsonl")
    assert plot_main([str(copy), "--out", str(tmp_path), "--keys", "actor/entropyy"]) == 2
    err = capsys.readouterr().err
    assert "no values for 'actor/entropyy'" in err and "actor/pg_loss" in err
    other = _write_jsonl(tmp_path / "other.jsonl", [{"step": 1, "data": {"foo": 1.0}}])
    assert plot_main([str(other), "--out", str(tmp_path)]) == 2
    assert "neither GRPO" in capsys.readouterr().err


def test_samples_are_matched_to_training_steps_and_read_compressed(tmp_path):
    """Step 0 is verl's validation before training (no samples); a run cut mid-step logs extra samples; a committed
    sample log may be gzipped."""
    import gzip

    metrics = _write_jsonl(tmp_path / "run.metrics.jsonl", [
        {"step": 0, "data": {"val-core/openspiel/hex/reward/mean@1": 0.1}},
        {"step": 1, "data": {"critic/score/mean": 0.25}},
        {"step": 2, "data": {"critic/score/mean": 0.75}},
    ])
    scores = [0.0, 0.5, 1.0, 0.5, 1.0, 1.0]  # 2 samples a step, then 2 of a step killed before it was logged
    lines = "".join(json.dumps({"time": i, "split": "train", "score": v, "valid": 1.0}) + "\n"
                    for i, v in enumerate(scores))
    (tmp_path / "run.samples.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    _, per_step = read_runs([metrics], per_step=2)
    assert {step: row["reward_mean"] for step, row in per_step.items()} == {1: 0.25, 2: 0.75}


def test_signal_and_collapse_panels_with_their_thresholds(tmp_path):
    """The per-step signal/collapse metrics (verl_ext/patches/step_signal.py) get their own panels; runs without them not."""
    steps = [{"step": step, "data": {"critic/score/mean": 0.5, "signal/group_share": share, "signal/format_rate": 0.9,
                                     "collapse/answer_entropy": entropy, "collapse/favourite_share": favourite,
                                     "collapse/distinct_share": 0.5, "collapse/favourite_share/connect_four": 0.82}}
             for step, share, entropy, favourite in ((1, 0.6, 1.2, 0.4), (2, 0.3, 0.5, 0.7), (3, 0.05, 0.1, 0.95))]
    run = _write_jsonl(tmp_path / "run.metrics.jsonl", steps)
    assert plot_main([str(run), "--out", str(tmp_path / "plots")]) == 0
    panels = json.loads((tmp_path / "plots" / "grpo_curves.json").read_text())["panels"]
    signal = panels["learning signal (GRPO groups)"]["lines"]
    assert signal["groups with differing rewards"] == [[1, 0.6], [2, 0.3], [3, 0.05]]
    assert signal["warning below 0.1"] == [[1, 0.1], [2, 0.1], [3, 0.1]]
    collapse = panels["collapse: answers within a group"]["lines"]
    assert collapse["answer entropy (nats)"][-1] == [3, 0.1] and collapse["favourite-answer share"][-1] == [3, 0.95]
    assert collapse["favourite warning above 0.8"][0] == [1, 0.8]
    assert panels["favourite answer's share of a case's replies"]["lines"]["connect_four"][0] == [1, 0.82]
    assert "single moves: favourite share" not in collapse  # a batch of one kind has no per-kind lines

    mixed = _write_jsonl(tmp_path / "mixed.metrics.jsonl", [{"step": 1, "data": {"critic/score/mean": 0.5,
        "collapse/answer_entropy": 0.4, "collapse/favourite_share": 0.85, "collapse/distinct_share": 0.3,
        "collapse/moves/answer_entropy": 1.05, "collapse/moves/favourite_share": 0.52,
        "collapse/openings/favourite_share": 1.0}}])
    assert plot_main([str(mixed), "--out", str(tmp_path / "mixed")]) == 0
    lines = json.loads((tmp_path / "mixed" / "grpo_curves.json").read_text())["panels"][
        "collapse: answers within a group"]["lines"]
    assert lines["single moves: favourite share"] == [[1, 0.52]]
    assert lines["game openings: favourite share"] == [[1, 1.0]]
    assert lines["single moves: answer entropy"] == [[1, 1.05]]

    plain = _write_jsonl(tmp_path / "plain.metrics.jsonl", [{"step": 1, "data": {"critic/score/mean": 0.5}}])
    assert plot_main([str(plain), "--out", str(tmp_path / "plain")]) == 0
    assert not any(title.startswith(("learning signal", "collapse"))
                   for title in json.loads((tmp_path / "plain" / "grpo_curves.json").read_text())["panels"])
