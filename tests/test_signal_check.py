"""`verl-ext signal`: the share of GRPO groups whose rewards differ, from hand-made scores and from a tiny random
Qwen2 through the transformers backend; the warning, --strict, bad input, and the train scripts' SIGNAL_PRECHECK."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.cli import SUBCOMMANDS
from verl_ext.cli import main as cli_main
from verl_ext.evaluation.backends import generated_length
from verl_ext.envs.config import ConfigError
from verl_ext.evaluation.signal_check import EXIT_NO_SIGNAL, apply_hydra_overrides
from verl_ext.evaluation.signal_check import main as signal_main
from verl_ext.evaluation.signal_report import (GroupTally, ScoredReply, has_signal, markdown, no_signal_kind,
                                               no_signal_warning)
from verl_ext.sample_text import printable
from verl_ext.tiny_model import build_qwen2

REPO = Path(__file__).resolve().parents[1]
ENV = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "openspiel.num_tasks_per_case=6"]
SMALL = ["--prompts", "4", "--n", "3", "--max-new-tokens", "8", "--backend", "transformers", "--no-progress"]


def replies(scores: list[float], tokens: int | None = 5) -> list[ScoredReply]:
    return [ScoredReply(reply="r", score=s, format_ok=s > 0, valid=s > 0, failed=False, tokens=tokens) for s in scores]


# ----------------------------------------------------------------------------------------------- group arithmetic
def test_a_group_has_signal_only_when_its_rewards_differ():
    assert not has_signal([0.0, 0.0, 0.0]) and not has_signal([0.5, 0.5]) and not has_signal([1.0] * 8)
    assert has_signal([0.0, 1.0, 0.0]) and has_signal([0.25, 0.2501])
    assert not has_signal([0.25, 0.2500001])  # closer than 1e-6: equal, as verl's std + 1e-6 and signal/group_share
    assert [no_signal_kind(g) for g in ([0.0, 0.0], [1.0, 1.0], [0.3, 0.3], [0.0, 0.3])] == [
        "all_zero", "all_full", "all_equal", None]
    with pytest.raises(ValueError, match="at least 2"):
        has_signal([1.0])


def test_tally_counts_groups_replies_and_the_token_cap():
    tally = GroupTally()
    for scores in ([0, 0, 0], [1, 0, 1], [1, 1, 1], [0.5, 0.5, 0.5], [0.2, 0.9, 0.2]):
        tally.add(replies([float(s) for s in scores]), max_new_tokens=8)
    tally.add(replies([0.0, 0.0, 0.0], tokens=8), max_new_tokens=8)  # three replies at the cap
    summary = tally.summary(0.95)
    share = summary["groups_with_signal"]
    assert summary["groups"] == 6 and summary["replies"] == 18
    assert share["k"] == 2 and share["n"] == 6 and share["rate"] == pytest.approx(2 / 6)
    assert 0.0 <= share["ci_low"] < share["rate"] < share["ci_high"] <= 1.0
    assert summary["groups_without_signal"] == {"all_zero": 2, "all_full": 1, "all_equal": 1}
    assert summary["format"]["k"] == 2 + 3 + 3 + 3  # replies scoring > 0 count as well formed here
    assert summary["hit_token_cap"]["k"] == 3 and summary["hit_token_cap"]["n"] == 18
    assert summary["mean_response_tokens"] == pytest.approx((15 * 5 + 3 * 8) / 18)


def test_unknown_lengths_leave_the_cap_share_empty():
    tally = GroupTally()
    tally.add(replies([0.0, 1.0], tokens=None), max_new_tokens=8)
    assert tally.summary(0.95)["hit_token_cap"] is None and tally.summary(0.95)["mean_response_tokens"] is None


def test_warning_fires_below_the_threshold_and_names_the_cures():
    tally = GroupTally()
    for _ in range(19):
        tally.add(replies([0.0] * 4, tokens=64), max_new_tokens=64)
    tally.add(replies([0.0, 1.0, 0.0, 0.0]), max_new_tokens=64)
    overall = tally.summary(0.95)
    warning = no_signal_warning(overall, threshold=0.1, max_new_tokens=64)
    assert warning is not None and warning.startswith("WARNING") and "1 of 20 GRPO groups" in warning
    for cure in ("cold start", "COLD_START=rules", "system_prompt", "easier tasks", "MAX_RESPONSE_LENGTH"):
        assert cure in warning
    assert no_signal_warning(overall, threshold=0.05, max_new_tokens=64) is None  # 5 % is not below 5 %


def test_groups_that_always_score_full_marks_ask_for_harder_tasks():
    tally = GroupTally()
    for _ in range(5):
        tally.add(replies([1.0] * 4), max_new_tokens=64)
    warning = no_signal_warning(tally.summary(0.95), threshold=0.1, max_new_tokens=64)
    assert warning is not None and "harder tasks" in warning and "cold start" not in warning
    assert "MAX_RESPONSE_LENGTH" not in warning  # no reply hit the cap


def test_replies_are_printed_safely():
    assert printable("a\x1b[31mred\x07\nnext\tcol") == "a\\x1b[31mred\\x07\nnext\tcol"
    assert printable("x" * 500, limit=10) == "x" * 10 + "…"
    report = {"settings": {"model": "m", "adapter": None, "backend": "transformers", "prompts": 1, "n": 2,
                           "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "seed": 0, "threshold": 0.1},
              "elapsed_s": 1.0, "cases": {}, "warning": None,
              "examples": [{"case": "c", "score": 0.0, "format_ok": False, "valid": False, "tokens": 3,
                            "reply": "````` breaks a fence"}]}
    tally = GroupTally()
    tally.add(replies([0.0, 1.0]), max_new_tokens=8)
    report["overall"] = tally.summary(0.95)
    assert "``````\n````` breaks a fence\n``````" in markdown(report)


def test_generated_length_counts_the_stop_token_not_the_padding():
    assert generated_length([5, 6, 2, 2, 2], {2}) == 3
    assert generated_length([5, 6, 7], {2}) == 3  # no stop token: every position was generated
    assert generated_length([5, 9, 2], {2, 9}) == 2


# ----------------------------------------------------------------------------------------- a tiny model, end to end
@pytest.fixture(scope="module")
def tiny_model(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen2(tmp_path_factory.mktemp("signal") / "model", "tiny", tokenizer_dir, seed=0, dtype="float32")


@pytest.fixture(scope="module")
def report_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict]:
    out = tmp_path_factory.mktemp("signal_out")
    code = cli_main(["signal", "--model", str(tiny_model), *ENV, *SMALL, "--out", str(out)])
    assert (out / "signal.md").read_text().startswith("# Signal check")
    return code, json.loads((out / "signal.json").read_text())


def test_report_counts_are_consistent(report_run):
    code, report = report_run
    assert code == 0 and "signal" in SUBCOMMANDS
    overall, groups = report["overall"], report["groups"]
    assert report["settings"]["prompts"] == overall["groups"] == len(groups) == 4
    assert overall["replies"] == 4 * 3 and all(len(g["scores"]) == 3 for g in groups)
    assert sum(c["groups"] for c in report["cases"].values()) == 4
    assert set(report["cases"]) == {"openspiel/tic_tac_toe", "openspiel/connect_four"}  # spread over the split
    share = overall["groups_with_signal"]
    assert share["k"] == sum(max(g["scores"]) - min(g["scores"]) > 1e-6 for g in groups)
    assert share["k"] + sum(overall["groups_without_signal"].values()) == 4
    assert 0.0 <= share["ci_low"] <= share["rate"] <= share["ci_high"] <= 1.0
    assert overall["valid"]["k"] <= overall["format"]["k"] <= overall["replies"]
    tokens = [t for g in groups for t in g["tokens"]]
    assert all(1 <= t <= 8 for t in tokens)
    assert overall["hit_token_cap"]["k"] == sum(t >= 8 for t in tokens)
    assert 1 <= len(report["examples"]) <= 3


def test_a_blank_model_gets_the_warning_and_strict_fails(report_run, tiny_model, capsys):
    _, report = report_run
    # a random-init model writes no well-formed answer: every group scores 0, as on the first GPU runs
    assert report["verdict"] == "no_signal" and report["overall"]["groups_without_signal"]["all_zero"] == 4
    assert report["warning"].startswith("WARNING")
    code = signal_main(["--model", str(tiny_model), *ENV, *SMALL, "--strict"])
    captured = capsys.readouterr()
    assert code == EXIT_NO_SIGNAL and captured.err.count("WARNING: GRPO will see") == 1
    assert "| **overall** | 4 |" in captured.out
    code = signal_main(["--model", str(tiny_model), *ENV, *SMALL, "--strict", "--threshold", "0"])
    captured = capsys.readouterr()
    assert code == 0 and "WARNING" not in captured.err and "Verdict: signal" in captured.out


def test_the_check_keeps_out_of_the_runs_sample_log(tiny_model, tmp_path, monkeypatch):
    log = tmp_path / "run.samples.jsonl"
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(log))
    assert signal_main(["--model", str(tiny_model), *ENV, *SMALL, "--prompts", "1", "--n", "2"]) == 0
    assert not log.exists() and os.environ["VERL_EXT_SAMPLE_LOG"] == str(log)


@pytest.mark.parametrize("args, message", [
    (["--n", "1"], "--n: a GRPO group needs at least 2 replies to compare, got 1"),
    (["--prompts", "0"], "--prompts: must be >= 1, got 0"),
    (["--threshold", "2"], "--threshold: a share of groups, must be in [0, 1], got 2.0"),
    (["--temperature", "0"], "--temperature: GRPO samples its groups, must be > 0"),
    (["--set", "openspiel.no_such_key=1"], "unknown key 'no_such_key'"),
    (["--set", "no-equals-sign"], "expected KEY=VALUE"),
    (["--max-prompt-length", "0"], "--max-new-tokens / --max-prompt-length: must be >= 1"),
])
def test_bad_input_is_refused_naming_the_value(tiny_model, args, message, capsys):
    assert signal_main(["--model", str(tiny_model), *ENV, *args]) == 2
    assert message in capsys.readouterr().err


def test_the_report_counts_training_prompts_the_cold_start_was_trained_on(tiny_model, tmp_path, capsys):
    """--cold-start-data (the recipe passes its SFT rows): the share of the training prompts that are cold-start
    positions, per case, in signal.json and signal.md, and a note on stderr when most are."""
    from verl_ext.export import build_rows, write_parquet
    from verl_ext.mixture import EnvMixture

    section = {"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 6}}
    sft = tmp_path / "sft_train.parquet"
    write_parquet(build_rows(EnvMixture(section), "train", "sft", answers="rules")[0], sft)
    out = tmp_path / "out"
    assert signal_main(["--model", str(tiny_model), *ENV, *SMALL, "--cold-start-data", str(sft),
                        "--out", str(out)]) == 0
    overlap = json.loads((out / "signal.json").read_text())["cold_start_overlap"]
    assert overlap["rows"] == 12 and overlap["overall"]["share"] == 1.0
    assert set(overlap["cases"]) == {"tic_tac_toe", "connect_four"}
    assert "## Training prompts the cold start was trained on" in (out / "signal.md").read_text()
    assert "NOTE: 100 % of GRPO's training prompts are positions the cold start was trained on" in \
        capsys.readouterr().err
    assert signal_main(["--model", str(tiny_model), *ENV, "--cold-start-data", str(tmp_path / "none.parquet")]) == 2
    assert "--cold-start-data: no such file" in capsys.readouterr().err


def test_env_overrides_take_hydra_syntax_for_data_env_keys_only():
    env = apply_hydra_overrides({"openspiel": {"game_types": ["hex"], "seed": 3}},
                                ["data.env.openspiel.game_types=[go]", "++data.env.size=10"])
    assert env == {"openspiel": {"game_types": ["go"], "seed": 3}, "size": 10}
    with pytest.raises(ConfigError, match="expected \\[\\+\\]data.env.KEY=VALUE, got 'trainer.seed=1'"):
        apply_hydra_overrides({}, ["trainer.seed=1"])
    with pytest.raises(ConfigError, match="--env-override"):
        apply_hydra_overrides({}, ["data.env.system_prompt='unclosed"])


def test_a_missing_model_is_named(capsys):
    assert signal_main(["--model", "/no/such/model", *ENV]) == 2
    assert "no such model folder '/no/such/model'" in capsys.readouterr().err
    assert signal_main(["--model", "scripted:random", *ENV]) == 2
    assert "scripted policy" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the train scripts' pre-check
def script_env(**env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_TYPES", "TASK_MODE", "SIGNAL_PRECHECK", "ROLLOUT_N"))}
    return {**environ, "PYTHON": sys.executable, **env}


def dry_run_lines(*overrides: str, **env: str) -> list[list[str]]:
    out = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run", *overrides],
                         check=True, capture_output=True, text=True, env=script_env(**env), cwd=REPO).stdout
    return [shlex.split(line) for line in out.splitlines() if line.strip()]


def test_dry_run_prints_the_signal_command_with_the_runs_settings():
    lines = dry_run_lines("+data.env.openspiel.reward_mode=engine", "data.max_response_length=48",
                          SIGNAL_PRECHECK="1", RUN_PROFILE="smoke", GAME_TYPES="tic_tac_toe",
                          MODEL_PATH="/models/m", LORA_ADAPTER_PATH="/ckpt/lora", SYSTEM_PROMPT="You're a bot: ${x}")
    assert len(lines) == 2 and lines[1][1:3] == ["-m", "verl_ext.launch.ppo_main"]
    signal = lines[0]
    assert signal[:4] == [sys.executable, "-m", "verl_ext.cli", "signal"]

    def flag(name: str) -> list[str]:
        return [signal[i + 1] for i, arg in enumerate(signal) if arg == name]

    assert flag("--model") == ["/models/m"] and flag("--adapter") == ["/ckpt/lora"]
    assert flag("--n") == ["4"] and flag("--prompts") == ["64"]  # the smoke profile's ROLLOUT_N
    assert flag("--max-new-tokens") == ["48"]  # the user's override wins over the profile's 64, as in Hydra
    overrides = flag("--env-override")
    assert overrides[-1] == "+data.env.openspiel.reward_mode=engine"
    env = apply_hydra_overrides({}, overrides)  # the run's data.env section, parsed as Hydra parses it for verl
    assert env["openspiel"]["game_types"] == ["tic_tac_toe"] and env["openspiel"]["reward_mode"] == "engine"
    assert env["system_prompt"] == "You're a bot: ${x}" and env["openspiel"]["num_tasks_per_case"] == 64
    assert "--strict" not in signal and flag("--out")[0].endswith(".signal")
    strict = dry_run_lines(SIGNAL_PRECHECK="strict", RUN_PROFILE="smoke")[0]
    assert "--strict" in strict and strict[strict.index("--model") + 1] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert len(dry_run_lines(RUN_PROFILE="smoke")) == 1  # off by default


def test_an_unknown_precheck_setting_is_refused():
    run = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env=script_env(SIGNAL_PRECHECK="yes", RUN_PROFILE="smoke"), cwd=REPO)
    assert run.returncode == 2 and "SIGNAL_PRECHECK must be one of: 0 1 strict only; got 'yes'" in run.stderr


def test_strict_precheck_runs_the_check_and_stops_the_run(tiny_model, tmp_path):
    """run_signal_precheck itself (as launch calls it): the report and the stop go to the console and the run log."""
    script = (f"source {shlex.quote(str(REPO / 'train/scripts/lib/common.sh'))}; "
              f"run_signal_precheck {shlex.quote(str(tmp_path / 'run'))} actor_rollout_ref.model.path={tiny_model} "
              "+data.env.openspiel.game_types=[tic_tac_toe] actor_rollout_ref.rollout.n=2 data.max_response_length=6")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO,
                         env=script_env(SIGNAL_PRECHECK="strict", SIGNAL_PRECHECK_PROMPTS="2",
                                        SIGNAL_PRECHECK_BACKEND="transformers"))
    assert run.returncode == 3, run.stderr
    assert "the run is not started" in run.stderr
    log = (tmp_path / "run.log").read_text()
    assert "| **overall** | 2 |" in log and log.count("WARNING: GRPO will see") == 1
    report = json.loads((tmp_path / "run.signal" / "signal.json").read_text())
    assert report["settings"]["n"] == 2 and report["settings"]["max_new_tokens"] == 6
