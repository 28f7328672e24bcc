"""The run summariser and the speed table read what verl writes and compute our share of step time right."""

from __future__ import annotations

import json

import pytest

from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

from bench_scripts import load_bench_script

summarize_run = load_bench_script("summarize_run")
compare_speed = load_bench_script("compare_speed")


def test_summary_reports_legal_rate_and_our_share_of_the_step(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 4}})
    refs = mixture.plan("train")
    rows = [mixture.row(ref, "train", i) for i, ref in enumerate(refs)]
    legal = [mixture.build(ref).legal_moves[0] for ref in refs]
    metrics = tmp_path / "run.metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics))
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "run.samples.jsonl"))
    logger = FileLogger("verl-ext", "test")
    responses = [f"<answer>{legal[0]}</answer>", "<answer>zz</answer>", "", f"<answer>{legal[3]}</answer>"]
    results = {}
    for step in (1, 2):
        # what the reward workers do during a step: score the step's samples (the log lines come from here)
        results[step] = [compute_score(r["data_source"], text, r["reward_model"]["ground_truth"],
                                       {**r["extra_info"], "dataset_ms": 2.0}) for r, text in zip(rows, responses)]
        compute_score(rows[0]["data_source"], "", "", {**rows[0]["extra_info"], "split": "val"})  # not a train step
        logger.log({"timing_s/step": 10.0, "timing_s/gen": 4.0, "response_length/mean": 8.0,
                    "critic/score/mean": 0.5, "not/kept": 1.0}, step=step)
    logger.finish()

    summary = summarize_run.summarise(*summarize_run.read_run(metrics))
    assert summary["num_steps"] == 2
    step = summary["steps"][1]
    assert step["verl_ext/samples"] == 4
    assert step["verl_ext/legal_rate"] == pytest.approx(0.5)
    assert step["verl_ext/format_rate"] == pytest.approx(0.75)
    assert step["verl_ext/reward_mean"] == pytest.approx((1.0 + 0.1 + 0.0 + 1.0) / 4)
    ours_s = sum(r["reward_ms"] + r["dataset_ms"] for r in results[2]) / 1000.0
    assert step["verl_ext/our_share_of_step"] == pytest.approx(ours_s / 10.0)
    assert step["generated_tokens_per_s_of_gen"] == pytest.approx(8.0 * 4 / 4.0)
    assert "not/kept" not in step
    assert summary["median_step_s_after_first"] == 10.0


def test_summary_reports_game_rates_over_the_game_samples_of_a_step(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    from verl_ext.games import RECORD_FIELD
    from verl_ext.games.match import GameRecord

    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 4,
                                        "task_mode": "mixed", "game_share": 0.5}})
    rows = [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]
    games = [r for r in rows if r["extra_info"].get("mode") == "game"]
    moves = [r for r in rows if r["extra_info"].get("mode") != "game"]
    assert games and moves
    metrics = tmp_path / "run.metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics))
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "run.samples.jsonl"))
    logger = FileLogger("verl-ext", "test")
    won = GameRecord("tic_tac_toe", 0, 0, "random", result="win", normalised_return=1.0, model_turns=3,
                     model_moves=3, format_ok=3, moves=5, model_tokens=30)
    lost = GameRecord("tic_tac_toe", 1, 1, "random", result="loss", forfeit="illegal_move", model_turns=1,
                      format_ok=1, moves=1, model_tokens=10, rejected=1)
    samples = [(games[0], won), (games[0], lost), (moves[0], None)]
    for row, record in samples:
        info = {**row["extra_info"], **({RECORD_FIELD: record.to_dict()} if record else {})}
        compute_score(row["data_source"], "<answer>x(0,0)</answer>", "", info)
    logger.log({"timing_s/step": 10.0}, step=1)
    logger.finish()
    step = summarize_run.summarise(*summarize_run.read_run(metrics))["steps"][0]
    assert step["verl_ext/samples"] == 3 and step["verl_ext/games"] == 2
    assert step["verl_ext/game_win"] == step["verl_ext/game_loss"] == step["verl_ext/game_forfeit"] == 0.5
    assert step["verl_ext/game_reward_mean"] == 0.5 and step["verl_ext/game_model_tokens"] == 20.0
    assert step["verl_ext/game_moves"] == 3.0 and step["verl_ext/game_truncated"] == 0.0


def test_sample_log_is_off_without_the_variable_and_survives_a_bad_path(tmp_path, monkeypatch):
    from verl_ext import sample_log

    monkeypatch.delenv("VERL_EXT_SAMPLE_LOG", raising=False)
    sample_log.record({"split": "train"}, {"score": 1.0})
    assert not list(tmp_path.iterdir())
    monkeypatch.setattr(sample_log, "_disabled", False)
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "missing-dir" / "samples.jsonl"))
    sample_log.record({"split": "train"}, {"score": 1.0})  # warns once, never raises
    assert sample_log._disabled


def test_summary_cli_names_a_missing_metrics_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        summarize_run.main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "s.json")])
    assert "nope.jsonl" in capsys.readouterr().err


def test_speed_table_puts_the_same_phases_side_by_side():
    ours = {"num_steps": 3, "steps": [
        {"timing_s/step": 60.0, "timing_s/gen": 50.0},  # warm-up step: excluded from medians
        *[{"timing_s/step": 4.0, "timing_s/gen": 2.0, "timing_s/update_actor": 1.5, "timing_s/update_weights": 0.2,
           "verl_ext/reward_ms_sum": 20.0, "generated_tokens_per_s_of_step": 1000.0} for _ in range(2)]]}
    trl = {"num_steps": 3, "steps": [
        {"timing_s/step": 30.0},
        *[{"timing_s/step": 2.0, "trl_timer_s/vLLM.generate": 1.0, "trl_timer_s/_prepare_inputs": 1.4,
           "trl_timer_s/sync_weights": 0.1, "trl_timer_s/_calculate_rewards": 0.1,
           "generated_tokens_per_s_of_step": 2000.0} for _ in range(2)]]}
    text = compare_speed.table(ours, trl, "16 x 4 x 64")
    assert "| step s | 4 | 2 | 2.00 |" in text
    assert "| generation s | 2 | 1 | 2.00 |" in text
    assert "| update s | 1.5 | 0.6 | 2.50 |" in text
    assert "| log-prob passes s | 0 | 0.2 | 0.00 |" in text
    assert "| reward s (ours, serial sum) | 0.02 | 0.1 | 0.20 |" in text


def test_speed_table_sets_our_generation_against_the_vllm_ceiling(tmp_path):
    ours = {"num_steps": 2, "steps": [
        {"timing_s/step": 97.0, "timing_s/gen": 42.2},
        {"timing_s/step": 60.1, "timing_s/gen": 36.2, "generated_tokens_per_s_of_gen": 9300.0,
         "response_length/mean": 330.0}]}
    vllm = {"runs": [{"wall_s": 25.0}, {"wall_s": 19.0}, {"wall_s": 18.5}], "generation_s": 18.75,
            "tokens_per_s": 15800.0, "mean_tokens": 293.0}
    text = compare_speed.table(ours, None, "128 x 8 x 512", vllm)
    assert "| | verl-ext (verl main_ppo) | vLLM offline (ceiling) | ours / vLLM |" in text
    assert "| generation s | 36.2 | 18.8 | 1.93 |" in text
    assert "| generated tokens/s (generation) | 9,300 | 15,800 | 0.59 |" in text
    assert "| update s | n/a |  |  |" in text  # the ceiling has no training phases
    assert "wall time 1.93x, time per generated token 1.70x (ours 330 vs vLLM 293 tokens" in text
    assert "vLLM offline 3 generate calls" in text and "TRL" not in text.split("\n")[2]
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    (tmp_path / "vllm.json").write_text(json.dumps(vllm))
    out = tmp_path / "compare.md"
    assert compare_speed.main(["--ours", str(tmp_path / "ours.json"), "--vllm", str(tmp_path / "vllm.json"),
                               "--out", str(out)]) == 0
    assert out.read_text() == compare_speed.table(ours, None, "", vllm)
    with pytest.raises(SystemExit):
        compare_speed.main(["--ours", str(tmp_path / "ours.json"), "--trl", str(tmp_path / "nope.json"),
                            "--out", str(out)])


def test_speed_table_has_a_start_up_row_when_either_side_measured_one(tmp_path):
    ours = {"num_steps": 2, "steps": [{"timing_s/step": 60.0}, {"timing_s/step": 45.0}]}
    trl = {"num_steps": 2, "steps": [{"timing_s/step": 70.0}, {"timing_s/step": 59.0}], "startup_s": 62.5}
    startup = {"launch_to_step1_start_s": 130.6, "milestones": []}
    text = compare_speed.table(ours, trl, "128 x 8 x 512", None, startup)
    assert "| start-up s (to step 1 started) | 131 | 62.5 | 2.09 |" in text
    assert "Start-up: ours from the train script's start" in text
    assert "start-up" not in compare_speed.table(ours, {**trl, "startup_s": None}, "")  # older TRL JSON: no row
    assert "| start-up s (to step 1 started) | n/a | 62.5 |  |" in compare_speed.table(ours, trl, "")
    for name, data in (("ours.json", ours), ("trl.json", trl), ("startup.json", startup)):
        (tmp_path / name).write_text(json.dumps(data))
    out = tmp_path / "compare.md"
    assert compare_speed.main(["--ours", str(tmp_path / "ours.json"), "--trl", str(tmp_path / "trl.json"),
                               "--ours-startup", str(tmp_path / "startup.json"), "--out", str(out)]) == 0
    assert out.read_text() == compare_speed.table(ours, trl, "", None, startup)
    with pytest.raises(SystemExit):
        compare_speed.main(["--ours", str(tmp_path / "ours.json"), "--ours-startup", str(tmp_path / "nope.json"),
                            "--out", str(out)])


def test_speed_table_shows_the_pauses_a_median_hides():
    # one step of four paused (e.g. a full garbage collection): the median stays, the mean and the slowest show it
    steps = [{"timing_s/step": 20.0}, *[{"timing_s/step": s} for s in (1.0, 1.0, 1.0, 1.8)]]
    text = compare_speed.table({"steps": steps}, {"steps": steps}, "16 x 4 x 64")
    assert "| step s | 1 | 1 | 1.00 |" in text
    assert "| step s (mean) | 1.2 | 1.2 | 1.00 |" in text
    assert "| step s (slowest) | 1.8 | 1.8 | 1.00 |" in text
