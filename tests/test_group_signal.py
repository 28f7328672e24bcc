"""bench/learning/group_signal.py: a blank model's GRPO groups carry no signal (every reply scores 0), as the first GPU
runs saw; bad arguments are refused."""

from __future__ import annotations

import json

from bench_scripts import load_bench_script
from verl_ext.tiny_model import build_qwen2

group_signal = load_bench_script("group_signal")


def test_a_blank_model_gives_only_zero_variance_groups(tmp_path, tokenizer_dir):
    model = build_qwen2(tmp_path / "blank", "tiny", tokenizer_dir, dtype="float32")
    out = tmp_path / "signal.json"
    code = group_signal.main(["--model", str(model), "--set", "openspiel.game_types=[tic_tac_toe]",
                              "--set", "openspiel.reward_mode=engine", "--prompts", "3", "--n", "3",
                              "--max-new-tokens", "8", "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0 and result["prompts"] == 3 and result["n"] == 3
    assert result["zero_variance_groups"] == 3 and result["mean_reward"] == 0.0 and result["best_of_n"] == 0.0


def test_bad_arguments_are_refused(capsys):
    assert group_signal.main(["--model", "x", "--n", "1"]) == 2
    assert "--n >= 2" in capsys.readouterr().err
    assert group_signal.main(["--model", "x", "--set", "no-equals-sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
