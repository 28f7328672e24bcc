"""`verl-ext eval` end to end: a tiny random-init Qwen2 (+ a LoRA adapter) through the transformers backend,
scripted baselines, config files, determinism and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.evaluation.backends import GenerationSettings, TransformersBackend, prompt_ids
from verl_ext.evaluation.cli import main as eval_main
from verl_ext.tiny_model import build_qwen2

ENV_ARGS = ["--set", "openspiel.game_types=[tic_tac_toe,leduc_poker]", "--set", "logic.cases=[mini_sudoku]",
            "--set", "val_tasks_per_case=3", "--set", "openspiel.mcts_simulations=20"]
GAME_ARGS = ["--games-per-case", "2", "--opponents", "random,mcts:10", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_model(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 2-layer Qwen2 (hidden 64) and a LoRA adapter on it whose weights are not zero."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    model_dir = build_qwen2(root / "model", "tiny", tokenizer_dir, seed=0, dtype="float32")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    peft_model.save_pretrained(root / "lora")
    return {"model": model_dir, "lora": root / "lora"}


@pytest.fixture(scope="module")
def e2e_run(tiny_model: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    out = tmp_path_factory.mktemp("eval_out")
    argv = [*ENV_ARGS, *GAME_ARGS, "--models", f"base={tiny_model['model']}",
            f"trained={tiny_model['model']},adapter={tiny_model['lora']}", "random=scripted:random",
            "--max-new-tokens", "12", "--backend", "transformers", "--batch-size", "4", "--out", str(out)]
    assert eval_main(argv) == 0
    return argv, out


def _proportion_ok(p: dict, n: int) -> None:
    assert p["n"] == n and 0 <= p["k"] <= n
    assert 0.0 <= p["ci_low"] <= p["rate"] <= p["ci_high"] <= 1.0


def test_cli_writes_consistent_json_markdown_and_png(e2e_run):
    _, out = e2e_run
    results = json.loads((out / "results.json").read_text())
    assert list(results["models"]) == ["base", "trained", "random"]
    assert results["settings"]["suites"] == ["single", "arena", "logic"]
    val_n = results["val_tasks_per_case"]
    for name, model in results["models"].items():
        assert model["backend"] == ("scripted" if name == "random" else "transformers")
        single = model["single_move"]
        assert list(single["cases"]) == ["tic_tac_toe", "leduc_poker"]
        for case in single["cases"].values():
            assert case["n"] == val_n and sum(case["reasons"].values()) == val_n
            _proportion_ok(case["format"], val_n)
            _proportion_ok(case["legal"], val_n)
            assert case["legal"]["k"] <= case["format"]["k"]  # a legal move is always a well-formed answer
            assert 0.0 <= case["engine_score"] <= 1.0 and 0.0 <= case["reward"] <= 1.0
            ci = case["engine_score_ci"]  # the mean's interval, around the mean and over the same n tasks
            assert ci["n"] == val_n and ci["mean"] == pytest.approx(case["engine_score"])
            assert ci["ci_low"] <= case["engine_score"] <= ci["ci_high"]
        assert single["overall"]["n"] == 2 * val_n
        assert single["overall"]["legal"]["k"] == sum(c["legal"]["k"] for c in single["cases"].values())
        matches = model["arena"]["matches"]
        assert [(m["case"], m["opponent"]) for m in matches] == [
            ("tic_tac_toe", "random"), ("tic_tac_toe", "mcts:10"), ("leduc_poker", "random"),
            ("leduc_poker", "mcts:10")]
        for m in matches:
            assert m["games"] == 2 and m["win"]["k"] + m["draw"]["k"] + m["loss"]["k"] == 2
            assert m["forfeit"]["k"] <= m["loss"]["k"]
            assert sum(m["forfeit_reasons"].values()) == m["forfeit"]["k"]
        logic = model["logic"]["cases"]["mini_sudoku"]
        assert logic["n"] == val_n and logic["accuracy"]["k"] <= logic["format"]["k"]
        _proportion_ok(logic["accuracy"], val_n)
    # the scripted random policy always answers a legal move; an untrained tiny model forfeits (or not) honestly
    rnd = results["models"]["random"]
    assert rnd["single_move"]["overall"]["legal"]["rate"] == 1.0
    assert all(m["forfeit"]["k"] == 0 for m in rnd["arena"]["matches"])
    # the LoRA adapter was really loaded: the same prompts give different replies
    base_replies = [s["reply"] for s in results["models"]["base"]["single_move"]["cases"]["tic_tac_toe"]["samples"]]
    lora_replies = [s["reply"] for s in results["models"]["trained"]["single_move"]["cases"]["tic_tac_toe"]["samples"]]
    assert base_replies and base_replies != lora_replies
    assert results["models"]["trained"]["spec"]["adapter"].endswith("lora")

    md = (out / "results.md").read_text()
    for needle in ("| case | n | base: legal", "trained: W/D/L", "| tic_tac_toe | mcts:10 |", "| mini_sudoku |",
                   "**all**"):
        assert needle in md
    png = (out / "results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_same_seed_gives_identical_json(e2e_run, tmp_path):
    argv, first_out = e2e_run
    argv = list(argv)
    argv[argv.index("--out") + 1] = str(tmp_path)
    assert eval_main(argv) == 0
    assert (tmp_path / "results.json").read_bytes() == (first_out / "results.json").read_bytes()


def test_transformers_backend_batches_like_single_prompts(tiny_model):
    settings = GenerationSettings(max_new_tokens=6, batch_size=8)
    backend = TransformersBackend(str(tiny_model["model"]), None, settings)
    chats = [[{"role": "user", "content": text}] for text in ("a", "a much longer prompt " * 5, "b c d")]
    batched = backend.generate(chats, [0, 1, 2])
    alone = [backend.generate([chat], [0])[0] for chat in chats]
    assert batched == alone  # left padding + attention mask: batching does not change greedy output
    for chat, reply in zip(chats, batched):
        assert len(backend.tokenizer(reply, add_special_tokens=False)["input_ids"]) <= 6 + 2
        ids = prompt_ids(backend.tokenizer, chat)
        text = backend.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and backend.tokenizer.decode(ids) == text
    sampled = GenerationSettings(max_new_tokens=6, temperature=1.0, batch_size=8)
    backend = TransformersBackend(str(tiny_model["model"]), None, sampled)
    assert backend.generate(chats, [5, 6, 7]) == backend.generate(chats, [5, 6, 7])
    backend.close()


def _scripted_run(out: Path, *extra: str) -> bytes:
    code = "import sys; from verl_ext.evaluation.cli import main; sys.exit(main(sys.argv[1:]))"
    args = [*ENV_ARGS, *GAME_ARGS, "--models", "first=scripted:first", "rnd=scripted:random", "--out", str(out),
            *extra]
    subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True,
                   env={"PYTHONHASHSEED": "random", "PATH": "/usr/bin:/bin",
                        "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return (out / "results.json").read_bytes()


def test_deterministic_across_processes_and_seed_matters(tmp_path):
    first = _scripted_run(tmp_path / "a")
    assert _scripted_run(tmp_path / "b") == first
    assert _scripted_run(tmp_path / "c", "--seed", "1") != first


def test_yaml_config_with_env_and_eval_sections(tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_text(
        "data:\n  env:\n    openspiel: {game_types: [tic_tac_toe], num_tasks_per_case: 8}\n"
        "    val_tasks_per_case: 2\n"
        "eval:\n  games_per_case: 3\n  opponents: [random]\n  models: {rnd: 'scripted:random'}\n"
        "  no_progress: true\n")
    assert eval_main(["--config", str(config), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["settings"]["games_per_case"] == 3 and results["settings"]["opponents"] == ["random"]
    assert results["settings"]["suites"] == ["single", "arena"]  # auto: no logic env configured
    assert results["models"]["rnd"]["arena"]["matches"][0]["games"] == 3
    # flags win over the file
    assert eval_main(["--config", str(config), "--games-per-case", "1", "--out", str(tmp_path / "o2")]) == 0
    assert json.loads((tmp_path / "o2" / "results.json").read_text())["settings"]["games_per_case"] == 1


def test_a_full_game_training_config_evaluates_single_moves_and_games(tmp_path):
    """The env section of a TASK_MODE=game run: held-out tasks are still single moves; games follow the flags."""
    config = tmp_path / "eval.yaml"
    config.write_text(
        "env:\n  openspiel: {game_types: [tic_tac_toe], task_mode: game, game: {opponent: self}}\n"
        "  val_tasks_per_case: 3\n"
        "eval:\n  games_per_case: 2\n  opponents: [random]\n  models: {rnd: 'scripted:random'}\n"
        "  no_progress: true\n  game_context: game\n")
    assert eval_main(["--config", str(config), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["settings"]["game_context"] == "game" and "task_mode" not in results["env"]["openspiel"]
    single = results["models"]["rnd"]["single_move"]["cases"]["tic_tac_toe"]
    assert single["n"] == 3 and single["legal"]["rate"] == 1.0
    assert results["models"]["rnd"]["arena"]["matches"][0]["games"] == 2


@pytest.mark.parametrize("argv,needle", [
    (["--models", "m=/no/such/model"], "--models m: no such model folder '/no/such/model'"),
    (["--models", "m=scripted:genius"], "unknown scripted policy 'genius'"),
    (["--models", "a=scripted:first", "a=scripted:random"], "model name 'a' is used twice"),
    (["--models", "a=scripted:first,lora=x"], "unknown option 'lora'"),
    (["--models", "a=scripted:first", "b=scripted:first", "--adapter", "/x"], "--adapter: applies to a single"),
    (["--models", "a=scripted:first", "--opponents", "random,alphazero"], "unknown opponent 'alphazero'"),
    (["--models", "a=scripted:first", "--suites", "single,poker"], "unknown suite 'poker'"),
    (["--models", "a=scripted:first", "--games-per-case", "0"], "--games-per-case: must be > 0"),
    (["--models", "a=scripted:first", "--max-new-tokens", "0"], "--max-new-tokens: must be > 0"),
    (["--models", "a=scripted:first", "--set", "openspiel.reward_mode=win"], "reward_mode: unknown value 'win'"),
    (["--models", "a=scripted:first", "--config", "/no/such.yaml"], "--config: no such file"),
    (["--models", "a=scripted:first", "--game-context", "all"], "--game-context: unknown value 'all'"),
    ([], "--models: name at least one model"),
])
def test_bad_input_is_a_clear_error(argv, needle, tmp_path, capsys):
    env = ["--set", "openspiel.game_types=[tic_tac_toe]", "--no-progress"]
    assert eval_main([*env, *argv, "--out", str(tmp_path / "out")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_models_are_compared_position_by_position_with_the_baseline(tmp_path):
    """Every model answers the same held-out positions in the same order: the paired change from the baseline
    (sft when evaluated, else the first model, or --paired-baseline) is the mean of per-position differences."""
    env = ["--set", "openspiel.game_types=[tic_tac_toe]", "--set", "val_tasks_per_case=20",
           "--set", "openspiel.mcts_simulations=20", "--suites", "single", "--no-progress"]
    out = tmp_path / "out"
    assert eval_main([*env, "--models", "first=scripted:first", "sft=scripted:random", "rnd=scripted:illegal",
                      "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    paired = results["single_move_paired"]
    assert paired["baseline"] == "sft" and set(paired["models"]) == {"first", "rnd"}
    base = results["models"]["sft"]["single_move"]["cases"]["tic_tac_toe"]
    for name in ("first", "rnd"):
        mine = results["models"][name]["single_move"]["cases"]["tic_tac_toe"]
        change = paired["models"][name]["tic_tac_toe"]
        assert change["positions"] == 20 == len(mine["engine_by_position"])
        assert change["change"]["mean"] == pytest.approx(mine["engine_score"] - base["engine_score"], abs=1e-5)
        assert change["better"] + change["worse"] <= 20
    illegal = paired["models"]["rnd"]["tic_tac_toe"]  # an illegal answer scores 0 wherever the baseline scored
    assert illegal["better"] == 0 and illegal["worse"] == sum(v > 0 for v in base["engine_by_position"])
    assert "Change from sft on the same positions" in (out / "results.md").read_text()

    assert eval_main([*env, "--models", "first=scripted:first", "rnd=scripted:random", "--paired-baseline", "rnd",
                      "--out", str(tmp_path / "named")]) == 0
    named = json.loads((tmp_path / "named" / "results.json").read_text())["single_move_paired"]
    assert named["baseline"] == "rnd" and list(named["models"]) == ["first"]


def test_an_unknown_paired_baseline_is_named(tmp_path, capsys):
    argv = ["--set", "openspiel.game_types=[tic_tac_toe]", "--models", "a=scripted:first", "--paired-baseline",
            "sft", "--no-progress", "--out", str(tmp_path / "out")]
    assert eval_main(argv) == 2
    assert "--paired-baseline: 'sft' is not one of the --models (a)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_suite_needs_its_env(tmp_path, capsys):
    argv = ["--set", "openspiel.game_types=[tic_tac_toe]", "--models", "a=scripted:first", "--suites", "logic",
            "--out", str(tmp_path)]
    assert eval_main(argv) == 2
    assert "--suites: 'logic' needs the 'logic' env" in capsys.readouterr().err


def test_unknown_eval_key_in_config(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("env:\n  openspiel: {game_types: [tic_tac_toe]}\neval:\n  game_per_case: 3\n")
    assert eval_main(["--config", str(config), "--models", "a=scripted:first", "--out", str(tmp_path / "o")]) == 2
    assert "unknown key eval.game_per_case" in capsys.readouterr().err


def test_model_loading_errors_are_clear(tiny_model, tmp_path, capsys):
    argv = ["--set", "openspiel.game_types=[tic_tac_toe]", "--models", f"m={tiny_model['model']}",
            "--backend", "transformers", "--no-progress", "--out", str(tmp_path / "o")]
    assert eval_main([*argv, "--device", "warp-drive"]) == 2
    assert "--device: invalid device 'warp-drive'" in capsys.readouterr().err
    assert eval_main([*argv, "--adapter", str(tmp_path / "missing")]) == 2
    assert "--models m adapter: no such model folder" in capsys.readouterr().err


def test_arena_table_shows_the_share_of_rejected_replies():
    from verl_ext.evaluation.report import markdown

    proportion = {"k": 3, "n": 10, "rate": 0.3, "ci_low": 0.1, "ci_high": 0.6}
    match = {"case": "tic_tac_toe", "opponent": "random", "win": proportion, "draw": {**proportion, "k": 0},
             "loss": {**proportion, "k": 7}, "forfeit": {**proportion, "k": 6}, "model_moves": 30,
             "rejected_replies": 10}
    results = {"settings": {"games_per_case": 10, "seed": 0, "confidence": 0.95},
               "models": {"sft": {"arena": {"matches": [match], "skipped": []}}}}
    # results written before the arena reported mean_return show '-' in its column
    assert "| tic_tac_toe | random | 3/0/7 | 30.0 [10.0, 60.0] | - | 6 (25.0 %) |" in markdown(results)
    match["mean_return"] = {"n": 10, "mean": 0.25, "sd": 1.0, "ci_low": -0.37, "ci_high": 0.87}
    assert "| 3/0/7 | 30.0 [10.0, 60.0] | +0.250 [-0.370, +0.870] | 6 (25.0 %) |" in markdown(results)
    assert "By the model's seat" not in markdown(results)  # results written before the arena kept seats


def test_arena_report_splits_each_match_by_the_models_seat():
    """The second seat's losses (issue 45's tic_tac_toe runs: 98/0/2 first, 60/23/17 second) show in the report."""
    from verl_ext.evaluation.report import markdown

    proportion = {"k": 158, "n": 200, "rate": 0.79, "ci_low": 0.728, "ci_high": 0.841}
    match = {"case": "tic_tac_toe", "opponent": "random", "win": proportion, "draw": {**proportion, "k": 23},
             "loss": {**proportion, "k": 19}, "forfeit": {**proportion, "k": 0}, "model_moves": 699,
             "rejected_replies": 0,
             "by_seat": {"1": {"win": 60, "draw": 23, "loss": 17}, "0": {"win": 98, "draw": 0, "loss": 2}}}
    results = {"settings": {"games_per_case": 200, "seed": 0, "confidence": 0.95},
               "models": {"grpo": {"arena": {"matches": [match], "skipped": []}}}}
    md = markdown(results)
    assert "| case | opponent | grpo: by seat |" in md
    assert "| tic_tac_toe | random | 0: 98/0/2 · 1: 60/23/17 |" in md
