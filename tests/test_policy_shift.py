"""bench/learning/policy_shift.py: a model compared with itself has not moved; with another model the move
distributions are valid (entropies within [0, log #moves], expected values within the move values)."""

from __future__ import annotations

import json
import math

from bench_scripts import load_bench_script
from verl_ext.tiny_model import build_qwen2

shift = load_bench_script("policy_shift")
ENV = ["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "openspiel.reward_mode=engine",
       "--set", "openspiel.mcts_simulations=30", "--prompts", "4"]


def test_same_model_has_not_moved_and_another_one_is_measured(tmp_path, tokenizer_dir):
    first = build_qwen2(tmp_path / "a", "tiny", tokenizer_dir, seed=0, dtype="float32")
    second = build_qwen2(tmp_path / "b", "tiny", tokenizer_dir, seed=1, dtype="float32")
    same = shift.policy_shift(str(first), str(first), {"openspiel": {"game_types": ["tic_tac_toe"],
                                                                     "reward_mode": "engine",
                                                                     "mcts_simulations": 30}}, 4)
    ttt = same["cases"]["tic_tac_toe"]
    assert ttt["prompts"] == 4 and ttt["value_before"] == ttt["value_after"]
    assert ttt["entropy_before"] == ttt["entropy_after"] and ttt["corr"] is None  # no change to correlate
    out = tmp_path / "shift.json"
    assert shift.main(["--before", str(first), "--after", str(second), *ENV, "--out", str(out)]) == 0
    moved = json.loads(out.read_text())["cases"]["tic_tac_toe"]
    assert 0.0 <= moved["entropy_after"] <= math.log(9) and 0.0 <= moved["value_after"] <= moved["best"] <= 1.0


def test_bad_arguments_are_refused(capsys):
    assert shift.main(["--before", "a", "--after", "b", "--prompts", "0"]) == 2
    assert "--prompts" in capsys.readouterr().err
