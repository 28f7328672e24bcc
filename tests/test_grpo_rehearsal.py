"""bench/learning/grpo_rehearsal.py: GRPO steps on CPU with verl's own advantage and loss functions and its composed actor
config. With lr 0 the policy must not move (the update is the only thing that changes the model); with a real lr
it must; the step metrics are well-formed; a bad override is named."""

from __future__ import annotations

import json

from bench_scripts import load_bench_script
from verl_ext.tiny_model import build_qwen2

rehearsal = load_bench_script("grpo_rehearsal")
SECTION = {"openspiel": {"game_types": ["tic_tac_toe"], "reward_mode": "engine", "mcts_simulations": 30}}
LR = "actor_rollout_ref.actor.optim.lr"


def _run(model, lr: str, **extra):
    return rehearsal.rehearse(str(model), SECTION, prompts=2, steps=2, n=4, overrides=[f"{LR}={lr}", *extra.get(
        "overrides", [])], eval_prompts=3, eval_every=2, max_new_tokens=8, micro_batch=4, seed=0,
        log=lambda line: None)


def test_lr_zero_keeps_the_policy_and_a_real_lr_moves_it(tmp_path, tokenizer_dir):
    model = build_qwen2(tmp_path / "m", "tiny", tokenizer_dir, seed=0, dtype="float32")
    frozen = _run(model, "0.0")
    assert [p["step"] for p in frozen["probes"]] == [0, 2]
    assert frozen["probes"][0]["tic_tac_toe"] == frozen["probes"][1]["tic_tac_toe"]
    for step in frozen["steps"]:
        assert 0.0 <= step["reward"] <= 1.0 and 0 <= step["zero_variance_groups"] <= step["groups"] == 2
        assert abs(step["ppo_kl"]) < 1e-6  # old log-probs are the model's own: exactly on-policy
    moved = _run(model, "0.05", overrides=["actor_rollout_ref.actor.entropy_coeff=0.01",
                                           "actor_rollout_ref.actor.use_kl_loss=True"])
    assert moved["entropy_coeff"] == 0.01 and moved["kl_loss_coef"] > 0 and moved["lr"] == 0.05
    assert moved["probes"][0]["tic_tac_toe"] != moved["probes"][1]["tic_tac_toe"]
    assert moved["probes"][0] == frozen["probes"][0]  # the same start, measured the same way


def test_cli_writes_json_and_names_a_bad_override(tmp_path, tokenizer_dir, capsys):
    model = build_qwen2(tmp_path / "m", "tiny", tokenizer_dir, seed=0, dtype="float32")
    out = tmp_path / "r.json"
    env = ["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "openspiel.reward_mode=engine",
           "--set", "openspiel.mcts_simulations=30", "--prompts", "2", "--n", "2", "--steps", "1",
           "--eval-prompts", "2", "--max-new-tokens", "8"]
    assert rehearsal.main(["--model", str(model), *env, "--override", f"{LR}=0.01", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["steps"]) == 1 and result["n"] == 2 and result["mini_batch_prompts"] == 1
    assert rehearsal.main(["--model", str(model), *env, "--override", "actor_rollout_ref.actor.no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err
    assert rehearsal.main(["--model", str(model), *env, "--steps", "0"]) == 2


def test_steps_wrap_around_a_small_plan(tmp_path, tokenizer_dir):
    """More prompts than training tasks: the plan is reused (epochs), a step never runs short."""
    model = build_qwen2(tmp_path / "m", "tiny", tokenizer_dir, seed=0, dtype="float32")
    section = {"openspiel": {**SECTION["openspiel"], "num_tasks_per_case": 1}}
    result = rehearsal.rehearse(str(model), section, prompts=3, steps=2, n=2, overrides=[f"{LR}=0.0"],
                                eval_prompts=1, eval_every=2, max_new_tokens=4, micro_batch=4, seed=0,
                                log=lambda line: None)
    assert [s["groups"] for s in result["steps"]] == [3, 3]


def test_lora_rank_trains_only_an_adapter(tmp_path, tokenizer_dir):
    """actor_rollout_ref.model.lora_rank > 0: a PEFT adapter (B = 0, so step 0 is the base model) is what trains."""
    model = build_qwen2(tmp_path / "m", "tiny", tokenizer_dir, seed=0, dtype="float32")
    full = _run(model, "0.0")
    # the blank model's replies all score 0 (no advantage): the entropy bonus gives the update a gradient
    lora = _run(model, "0.05", overrides=["actor_rollout_ref.model.lora_rank=4",
                                          "actor_rollout_ref.model.lora_alpha=8",
                                          "actor_rollout_ref.actor.entropy_coeff=0.01"])
    assert lora["lora"] == {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "exclude_modules": None}
    assert 0 < lora["trainable_parameters"] < full["trainable_parameters"]
    assert lora["probes"][0] == full["probes"][0]  # the fresh adapter leaves the policy as it was
    assert lora["probes"][0]["tic_tac_toe"] != lora["probes"][1]["tic_tac_toe"]
