"""The train scripts' commands compose against verl 0.9.1's own Hydra schema (no GPU needed).

Each script prints its full command with --dry-run; we compose verl's config with exactly those
overrides, so a misspelt or removed verl key fails here, not on a GPU node.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from verl_ext.launch.preflight import check_ppo, compose, main as preflight_main

REPO = Path(__file__).resolve().parents[1]
GRPO_SCRIPTS = ["openspiel-ppo.sh", "logic-grpo.sh"]


def dry_run(script: str, *overrides: str, **env: str) -> list[str]:
    """The command a script would run, as argv."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_TYPES", "TASK_MODE", "GAME_OPPONENT", "MAX_REPLY_LENGTH"))}
    environ.update(env)
    out = subprocess.run(["bash", str(REPO / "train" / "scripts" / script), "--dry-run", *overrides],
                         check=True, capture_output=True, text=True, env=environ, cwd=REPO).stdout
    return shlex.split(out)


def overrides_of(argv: list[str]) -> list[str]:
    """The Hydra overrides after `-m verl.trainer.<module>` (sft.sh has `-m torch.distributed.run` before it) or
    after `-m verl_ext.launch.ppo_main` (PREFLIGHT_IN_PROCESS=1) and its own options (TASK_RUNNER=driver)."""
    index = next(i for i, arg in enumerate(argv[:-1])
                 if arg == "-m" and (argv[i + 1].startswith("verl.trainer.") or argv[i + 1] == "verl_ext.launch.ppo_main"))
    if argv[index + 1] == "verl_ext.launch.ppo_main":
        from verl_ext.launch.ppo_main import split_options

        return split_options(argv[index + 2:])[1]
    return argv[index + 2:]


def runtime_env_modules(**env: str) -> str | None:
    """``VERL_USE_EXTERNAL_MODULES`` in the job's runtime_env of openspiel-ppo.sh's smoke run with ``env``
    (``SIGNAL_CHECK=off``, ``GRPO_TIED_GROUPS=verl`` and ``MOVE_CREDIT=off`` unless given: the tests that pin other
    modules' lists leave the step-signal, tied-groups and move-credit ones out)."""
    from omegaconf import OmegaConf

    env = {"SIGNAL_CHECK": "off", "GRPO_TIED_GROUPS": "verl", "MOVE_CREDIT": "off", **env}

    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.get("runtime_env") or {}).get("env_vars") or {}
    return env_vars.get("VERL_USE_EXTERNAL_MODULES")


def value(overrides: list[str], key: str) -> str:
    return [o.split("=", 1)[1] for o in overrides if o.lstrip("+").split("=", 1)[0] == key][-1]


@pytest.mark.parametrize("script", GRPO_SCRIPTS)
@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_grpo_command_composes_and_passes_preflight(script, profile):
    argv = dry_run(script, RUN_PROFILE=profile)
    assert argv[1:3] == ["-m", "verl_ext.launch.ppo_main"]  # our pre-flight, then verl's main_ppo, one process
    verl_order = dict(PREFLIGHT_IN_PROCESS="0", TASK_RUNNER="actor", TRANSFER_QUEUE_START="serial",
                      ROLLOUT_MODEL_INFO="off")
    assert dry_run(script, RUN_PROFILE=profile, **verl_order)[1:3] == ["-m", "verl.trainer.main_ppo"]
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.model.lora_rank == 32 and cfg.actor_rollout_ref.model.lora_alpha == 32
    assert cfg.actor_rollout_ref.model.target_modules == "all-linear"
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(6e-5)
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.data.custom_cls.path == "pkg://verl_ext.dataset"
    assert cfg.reward.custom_reward_function.name == "compute_score"


def test_knobs_map_to_verl_keys():
    argv = dry_run("openspiel-ppo.sh", ENABLE_LORA="0", FSDP_STRATEGY="fsdp", ROLLOUT_BACKEND="sglang",
                   LAYERED_SUMMON="1", LORA_ADAPTER_PATH="/ckpt/lora_adapter", GAME_TYPES="hex,go",
                   N_GPUS_PER_NODE="8", NNODES="2", MODEL_PATH="/models/qwen", RUN_PROFILE="smoke")
    cfg = compose("ppo_trainer", overrides_of(argv))
    model, rollout = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.rollout
    assert model.lora_rank == 0 and cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp" and cfg.actor_rollout_ref.ref.strategy == "fsdp"
    assert rollout.name == "sglang" and rollout.layered_summon is True
    assert model.lora_adapter_path == "/ckpt/lora_adapter" and model.path == "/models/qwen"
    assert list(cfg.data.env.openspiel.game_types) == ["hex", "go"]
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.trainer.nnodes == 2


def test_speed_knobs_map_to_verl_keys():
    fast = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke")))
    arr = fast.actor_rollout_ref
    assert arr.rollout.enforce_eager is False and arr.actor.use_dynamic_bsz is True
    assert arr.rollout.log_prob_use_dynamic_bsz is True and arr.ref.log_prob_use_dynamic_bsz is True
    # old log-probs from the actor's own pass, and vLLM not asked for per-token log-probs (docs/runs/2026-11-25-h100-log-probs/NOTES.md, section 0i)
    assert fast.algorithm.rollout_correction.bypass_mode is False and arr.rollout.calculate_log_probs is False
    assert arr.actor.use_kl_loss is False  # no KL: verl skips the reference pass
    assert fast.trainer.rollout_data_dir is None and "file" in fast.trainer.logger
    assert arr.model.use_fused_kernels is True and arr.actor.fsdp_config.model_dtype == "fp32"
    # torch_varlen: packed micro batches (verl_ext.patches.attention registered through external_lib), 64k tokens each;
    # the merged LoRA sync out of place (verl_ext.patches.lora_merged_sync) and, for the cases it leaves to verl's path, its
    # backup in reused pinned buffers (verl_ext.patches.lora_backup), same import
    assert arr.model.override_config.attn_implementation == "torch_varlen" and arr.model.use_remove_padding is True
    assert list(arr.model.external_lib) == ["verl_ext.patches.attention", "verl_ext.patches.lora_backup", "verl_ext.patches.lora_merged_sync"]
    assert arr.actor.ppo_max_token_len_per_gpu == 65536
    assert arr.rollout.log_prob_max_token_len_per_gpu == arr.ref.log_prob_max_token_len_per_gpu == 65536
    # vLLM stays resident between rollouts (no sleep/wake a step); SGLang keeps verl's sleep (not measured)
    assert arr.rollout.free_cache_engine is False
    sglang = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                          ROLLOUT_BACKEND="sglang")))
    assert sglang.actor_rollout_ref.rollout.free_cache_engine is True
    sleeping = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                            ROLLOUT_FREE_CACHE="1")))
    assert sleeping.actor_rollout_ref.rollout.free_cache_engine is True
    flash = compose("ppo_trainer", overrides_of(dry_run(
        "openspiel-ppo.sh", RUN_PROFILE="smoke", ATTN_IMPLEMENTATION="flash_attention_2")))
    assert flash.actor_rollout_ref.model.use_remove_padding is True
    assert list(flash.actor_rollout_ref.model.external_lib) == ["verl_ext.patches.lora_backup", "verl_ext.patches.lora_merged_sync"]
    sdpa = compose("ppo_trainer", overrides_of(dry_run(
        "openspiel-ppo.sh", RUN_PROFILE="smoke", ATTN_IMPLEMENTATION="sdpa")))
    assert sdpa.actor_rollout_ref.model.use_remove_padding is False  # padded rows beat one block-masked packed row
    assert sdpa.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 16384
    plain = compose("ppo_trainer", overrides_of(dry_run(
        "openspiel-ppo.sh", RUN_PROFILE="smoke", ENFORCE_EAGER="True", USE_DYNAMIC_BSZ="0",
        BYPASS_OLD_LOG_PROB="0", KL_LOSS_COEF="0.001", GRADIENT_CHECKPOINTING="0", ROLLOUT_DUMP_DIR="/tmp/dumps",
        USE_FUSED_KERNELS="0", USE_REMOVE_PADDING="1", ACTOR_MODEL_DTYPE="bf16")))
    arr = plain.actor_rollout_ref
    assert arr.rollout.enforce_eager is True and arr.actor.use_dynamic_bsz is False
    assert plain.algorithm.rollout_correction.bypass_mode is False
    assert arr.actor.use_kl_loss is True and arr.actor.kl_loss_coef == pytest.approx(0.001)
    assert arr.model.enable_gradient_checkpointing is False and plain.trainer.rollout_data_dir == "/tmp/dumps"
    assert arr.model.use_fused_kernels is False and arr.model.use_remove_padding is True
    assert arr.actor.fsdp_config.model_dtype == "bf16"
    assert check_ppo(plain, check_imports=False) == []


@pytest.mark.parametrize("lora, kl", [("1", "0.1"), ("1", "0"), ("0", "0.1")])
def test_old_log_probs_are_recomputed_by_default(lora, kl):
    """The actor computes the old log-probs by default, with or without LoRA and KL (LoRA + KL needs it:
    tests/test_fsdp2_lora_first_forward.py), and the rollout is not asked for its own."""
    config = compose("ppo_trainer", overrides_of(dry_run(
        "openspiel-ppo.sh", RUN_PROFILE="smoke", ENABLE_LORA=lora, KL_LOSS_COEF=kl)))
    assert config.algorithm.rollout_correction.bypass_mode is False
    assert config.actor_rollout_ref.rollout.calculate_log_probs is False
    assert config.actor_rollout_ref.actor.use_kl_loss is (kl != "0")


def test_lora_with_kl_and_bypass_is_refused():
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                            capture_output=True, text=True,
                            env={**os.environ, "ENABLE_LORA": "1", "KL_LOSS_COEF": "0.05", "BYPASS_OLD_LOG_PROB": "1"})
    assert result.returncode == 2
    assert "BYPASS_OLD_LOG_PROB=1 with ENABLE_LORA=1 and KL_LOSS_COEF=0.05 fails at the first backward" in result.stderr


@pytest.mark.parametrize("env, bypass, log_probs", [
    ({}, False, False), ({"BYPASS_OLD_LOG_PROB": "1"}, True, True), ({"ROLLOUT_LOG_PROBS": "1"}, False, True),
    ({"BYPASS_OLD_LOG_PROB": "1", "ROLLOUT_LOG_PROBS": "1"}, True, True),
])  # fmt: skip
def test_rollout_log_probs_switch_reaches_verl(env, bypass, log_probs):
    """ROLLOUT_LOG_PROBS maps to rollout.calculate_log_probs and follows BYPASS_OLD_LOG_PROB unless set."""
    config = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
    assert config.algorithm.rollout_correction.bypass_mode is bypass
    assert config.actor_rollout_ref.rollout.calculate_log_probs is log_probs
    assert check_ppo(config, check_imports=False) == []


def test_bypass_without_rollout_log_probs_is_refused(capsys):
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                            text=True, env={**os.environ, "BYPASS_OLD_LOG_PROB": "1", "ROLLOUT_LOG_PROBS": "0"})
    assert result.returncode == 2
    assert "ROLLOUT_LOG_PROBS=0 with BYPASS_OLD_LOG_PROB=1: bypass mode trains on the rollout's log-probs" in result.stderr
    # the same pair written as Hydra overrides is caught by the pre-flight
    argv = dry_run("openspiel-ppo.sh", "algorithm.rollout_correction.bypass_mode=True", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "actor_rollout_ref.rollout.calculate_log_probs=False) with BYPASS_OLD_LOG_PROB=1" in capsys.readouterr().err


def test_extra_arguments_pass_through_as_overrides():
    argv = dry_run("openspiel-ppo.sh", "trainer.total_training_steps=7", "data.env.openspiel.reward_mode=engine",
                   "+data.env.openspiel.mcts_simulations=50", RUN_PROFILE="smoke")
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert cfg.trainer.total_training_steps == 7
    assert cfg.data.env.openspiel.reward_mode == "engine" and cfg.data.env.openspiel.mcts_simulations == 50
    assert check_ppo(cfg, check_imports=False) == []


def test_sft_command_composes():
    argv = dry_run("sft.sh", MODEL_PATH="/models/qwen", PYTHON="/opt/venv/bin/python")
    # torchrun through the scripts' own interpreter: a `torchrun` on PATH may belong to another environment
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"] and "verl.trainer.sft_trainer" in argv
    cfg = compose("sft_trainer_engine", overrides_of(argv))
    assert cfg.model.lora_rank == 32 and cfg.data.messages_key == "messages" and cfg.engine.strategy == "fsdp2"


def test_sft_preflight_warns_when_no_validation_batch_fits(tmp_path, capsys):
    """verl's SFT validates in whole batches of SFT_BATCH_SIZE rows (drop_last): a validation file with fewer rows
    logs no validation loss (the 2026-12-07 tic_tac_toe cold start: 64 rows, batches of 128). The pre-flight says
    so, naming both numbers and the cures, and lets the run go on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl_ext.launch.preflight import sft_warnings

    val = tmp_path / "sft_val.parquet"
    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "x"}]] * 64}), val)
    argv = dry_run("sft.sh", MODEL_PATH="/models/qwen", SFT_VAL_FILE=str(val), SFT_BATCH_SIZE="128")
    (warning,) = sft_warnings(compose("sft_trainer_engine", overrides_of(argv)))
    assert "data.val_files has 64 rows, fewer than SFT_BATCH_SIZE (data.train_batch_size=128)" in warning
    assert "logs no validation loss" in warning and "lower SFT_BATCH_SIZE to 64 or less" in warning
    fits = dry_run("sft.sh", MODEL_PATH="/models/qwen", SFT_VAL_FILE=str(val), SFT_BATCH_SIZE="32")
    assert sft_warnings(compose("sft_trainer_engine", overrides_of(fits))) == []
    assert preflight_main(["--config-name", "sft_trainer_engine", "--", *overrides_of(argv)]) == 2  # no train file
    assert "pre-flight: warning: data.val_files has 64 rows" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_fused_kernel_backend_reaches_verl(backend):
    """FUSED_KERNELS_BACKEND picks verl's fused log-prob implementation in GRPO and SFT alike (torch by default)."""
    env = {} if backend == "torch" else {"FUSED_KERNELS_BACKEND": backend}
    grpo = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
    assert grpo.actor_rollout_ref.model.use_fused_kernels is True
    assert grpo.actor_rollout_ref.model.fused_kernel_options.impl_backend == backend
    assert check_ppo(grpo, check_imports=False) == []
    sft = compose("sft_trainer_engine", overrides_of(dry_run("sft.sh", MODEL_PATH="/models/qwen", **env)))
    assert sft.model.use_fused_kernels is True and sft.model.fused_kernel_options.impl_backend == backend


@pytest.mark.parametrize("env,message", [
    ({"TRAIN_BATCH_SIZE": "12"}, "TRAIN_BATCH_SIZE (data.train_batch_size=12) must be a multiple of PPO_MINI_BATCH_SIZE"),
    ({"ROLLOUT_N": "3", "N_GPUS_PER_NODE": "5"}, "must divide by the GPU count N_GPUS_PER_NODE"),
    ({"MICRO_BATCH_SIZE_PER_GPU": "5", "USE_DYNAMIC_BSZ": "0"},
     "MICRO_BATCH_SIZE_PER_GPU (actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5)"),
    ({"MAX_TOKEN_LEN_PER_GPU": "512"},
     "MAX_TOKEN_LEN_PER_GPU (actor_rollout_ref.actor.ppo_max_token_len_per_gpu=512) must hold one whole sequence"),
    ({"GAME_TYPES": "hexx"}, "'hexx' matches no case"),
])
def test_preflight_names_the_variable(env, message, capsys):
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert message in capsys.readouterr().err


def test_preflight_rejects_a_misspelt_key(capsys):
    argv = dry_run("openspiel-ppo.sh", "trainer.total_trainig_steps=3", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "total_trainig_steps" in capsys.readouterr().err


def test_invalid_profile_is_refused():
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                            capture_output=True, text=True, env={**os.environ, "RUN_PROFILE": "huge"})
    assert result.returncode == 2 and "RUN_PROFILE must be smoke or full, got 'huge'" in result.stderr


@pytest.mark.parametrize("mode", ["game", "mixed"])
def test_full_game_mode_composes_and_passes_preflight(mode):
    """TASK_MODE=game: game rows, verl's agent loop registered from our file, a response budget for whole games."""
    from omegaconf import OmegaConf

    from verl_ext.games import AGENT_LOOP_CONFIG, GAME_AGENT_NAME
    from verl_ext.mixture import EnvMixture

    argv = dry_run("openspiel-ppo.sh", TASK_MODE=mode, GAME_OPPONENT="mcts:50", RUN_PROFILE="smoke")
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert check_ppo(cfg, check_imports=False) == []
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.agent.agent_loop_config_path == str(AGENT_LOOP_CONFIG) and rollout.multi_turn.enable is True
    assert GAME_AGENT_NAME in {e.name for e in OmegaConf.load(rollout.agent.agent_loop_config_path)}
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (512, 3584)
    assert rollout.response_length == 3584  # verl's rollout budget follows data.max_response_length
    openspiel = cfg.data.env.openspiel
    assert openspiel.task_mode == mode and openspiel.game.opponent == "mcts:50"
    assert openspiel.game.max_tokens_per_turn == 256 and list(openspiel.game_types) == ["tic_tac_toe", "connect_four"]
    assert cfg.trainer.experiment_name == "openspiel-game-grpo-smoke"
    assert EnvMixture(OmegaConf.to_container(cfg.data.env, resolve=True)).has_games
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 0


@pytest.mark.parametrize("game_types, budget", [("kuhn_poker", "1024"), ("leduc_poker,kuhn_poker", "2048"),
                                                ("holdem_small", "2048"), ("kuhn_poker,hanabi_small", "6144"),
                                                ("leduc_poker,connect_four", "3584")])
def test_card_games_get_response_budgets_of_their_own(game_types, budget):
    """TASK_MODE=game: the largest budget of the listed games (docs/games.md, "Poker and Hanabi"); MAX_RESPONSE_LENGTH
    still wins, and the named small cases pass the pre-flight check."""
    overrides = overrides_of(dry_run("openspiel-ppo.sh", TASK_MODE="game", GAME_TYPES=game_types, RUN_PROFILE="smoke"))
    assert value(overrides, "data.max_response_length") == budget
    assert value(overrides, "data.max_prompt_length") == "512"
    assert preflight_main(["--no-import-check", "--", *overrides]) == 0
    overrides = overrides_of(dry_run("openspiel-ppo.sh", TASK_MODE="game", GAME_TYPES=game_types, RUN_PROFILE="smoke",
                                     MAX_RESPONSE_LENGTH="700"))
    assert value(overrides, "data.max_response_length") == "700"


def test_game_rows_without_the_agent_loop_registration_fail_preflight(capsys):
    argv = dry_run("openspiel-ppo.sh", "+data.env.openspiel.task_mode=game", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "need actor_rollout_ref.rollout.agent.agent_loop_config_path" in capsys.readouterr().err
    argv = dry_run("openspiel-ppo.sh", "actor_rollout_ref.rollout.agent.agent_loop_config_path=/nope.yaml",
                   TASK_MODE="game", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "TASK_MODE (actor_rollout_ref.rollout.agent.agent_loop_config_path=/nope.yaml): no such file" in (
        capsys.readouterr().err)
    argv = dry_run("openspiel-ppo.sh", TASK_MODE="game", GAME_OPPONENT="alphazero", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "data.env.openspiel.game.opponent: unknown opponent 'alphazero'" in capsys.readouterr().err


def test_an_opponent_mixture_passes_hydra_and_preflight(capsys):
    """GAME_OPPONENT with commas and colons reaches the game settings as one string (quoted for Hydra)."""
    from omegaconf import OmegaConf

    from verl_ext.mixture import EnvMixture

    argv = dry_run("openspiel-ppo.sh", TASK_MODE="game", GAME_OPPONENT="random:0.3,mcts:25:0.4,self:0.3",
                   RUN_PROFILE="smoke")
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert cfg.data.env.openspiel.game.opponent == "random:0.3,mcts:25:0.4,self:0.3"
    assert check_ppo(cfg, check_imports=False) == []
    settings = EnvMixture(OmegaConf.to_container(cfg.data.env, resolve=True)).adapters["openspiel"].game_settings
    assert settings.opponent_mixture.shares() == {"random": 0.3, "mcts:25": 0.4, "self": 0.3}
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 0
    argv = dry_run("openspiel-ppo.sh", TASK_MODE="game", GAME_OPPONENT="random:0,self:0", RUN_PROFILE="smoke")
    assert preflight_main(["--no-import-check", "--", *overrides_of(argv)]) == 2
    assert "data.env.openspiel.game.opponent: the weights of 'random:0,self:0' are all zero" in (
        capsys.readouterr().err)
    listed = ('+data.env.openspiel.game.opponents=[{spec:random,weight:0.3},{spec:"mcts:25",weight:0.4},'
              '{spec:self,weight:0.3}]')  # the list form of docs/games.md, as an extra override
    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", listed, TASK_MODE="game",
                                                      RUN_PROFILE="smoke")))
    settings = EnvMixture(OmegaConf.to_container(cfg.data.env, resolve=True)).adapters["openspiel"].game_settings
    assert settings.opponent_mixture.shares() == {"random": 0.3, "mcts:25": 0.4, "self": 0.3}


def test_invalid_task_mode_is_refused():
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                            capture_output=True, text=True, env={**os.environ, "TASK_MODE": "games"})
    assert result.returncode == 2 and "TASK_MODE must be move, game or mixed, got 'games'" in result.stderr
# ---------------------------------------------------------------------------------------------------------------
# The documented switches, alone and combined, against verl 0.9.1's own config code
# ---------------------------------------------------------------------------------------------------------------
HEAD = {"RAY_ADDRESS": "10.0.0.1:6379"}  # what train/slurm/multinode.sbatch exports for a multi-node run
SWITCHES = [
    ("full fine-tune", {"ENABLE_LORA": "0"}, "smoke"),
    ("FSDP1", {"FSDP_STRATEGY": "fsdp"}, "smoke"),
    ("FSDP1 full fine-tune, fixed micro batches", {"FSDP_STRATEGY": "fsdp", "ENABLE_LORA": "0", "USE_DYNAMIC_BSZ": "0"},
     "smoke"),
    ("SGLang", {"ROLLOUT_BACKEND": "sglang"}, "smoke"),
    ("SGLang, full fine-tune, FSDP1", {"ROLLOUT_BACKEND": "sglang", "ENABLE_LORA": "0", "FSDP_STRATEGY": "fsdp"},
     "smoke"),
    ("2 GPUs", {"N_GPUS_PER_NODE": "2"}, "smoke"),
    ("2 GPUs, rollout TP 2", {"N_GPUS_PER_NODE": "2", "TENSOR_PARALLEL_SIZE": "2"}, "smoke"),
    ("2 GPUs, rollout TP 2, full", {"N_GPUS_PER_NODE": "2", "TENSOR_PARALLEL_SIZE": "2"}, "full"),
    ("2 nodes x 8 GPUs, SGLang TP 2", {"NNODES": "2", "N_GPUS_PER_NODE": "8", "TENSOR_PARALLEL_SIZE": "2",
                                       "ROLLOUT_BACKEND": "sglang"}, "full"),
    ("LoRA served as an adapter", {"ROLLOUT_LORA_MERGE": "0"}, "smoke"),
    ("LoRA served as an adapter, SGLang", {"ROLLOUT_LORA_MERGE": "0", "ROLLOUT_BACKEND": "sglang"}, "smoke"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "env", "profile"), SWITCHES, ids=[s[0] for s in SWITCHES])
def test_documented_switches_compose_and_pass_verl_validation(label, env, profile):
    """Every switch combination composes, passes our pre-flight and verl's validate_config, and builds the verl
    config objects its workers build (the FSDP engine version, the rollout config and its replica size)."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE=profile, **env)))
    environ = HEAD if env.get("NNODES", "1") != "1" else {}
    assert check_ppo(cfg, check_imports=False, environ=environ) == [], label
    arr = cfg.actor_rollout_ref
    strategy, lora = env.get("FSDP_STRATEGY", "fsdp2"), env.get("ENABLE_LORA", "1") == "1"
    assert arr.actor.strategy == arr.ref.strategy == strategy
    # verl/workers/config/actor.py:325: the engine reads fsdp_config.strategy to pick FSDP1 or FSDP2
    assert omega_conf_to_dataclass(arr.actor).fsdp_config.strategy == strategy
    assert arr.model.lora_rank == (32 if lora else 0)
    assert arr.actor.optim.lr == pytest.approx(6e-5 if lora else 1e-6)
    rollout = omega_conf_to_dataclass(arr.rollout)  # RolloutConfig.__post_init__ checks parallel sizes
    tp = int(env.get("TENSOR_PARALLEL_SIZE", "1"))
    assert rollout.name == env.get("ROLLOUT_BACKEND", "vllm") and rollout.tensor_model_parallel_size == tp
    gpus = int(env.get("N_GPUS_PER_NODE", "1")) * int(env.get("NNODES", "1"))
    assert cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes == gpus
    assert rollout.n_gpus_per_node == cfg.trainer.n_gpus_per_node
    assert gpus % tp == 0, "verl/workers/rollout/replica.py: one replica per TP group"
    assert arr.rollout.load_format == "safetensors" and arr.rollout.mode == "async"
    # LoRA: verl sends merged weights (no adapter) to the rollout engine unless ROLLOUT_LORA_MERGE=0
    assert arr.model.lora.merge is (lora and env.get("ROLLOUT_LORA_MERGE", "1") == "1")


def test_verl_rollouts_list_matches_verls_registry():
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    from verl_ext.launch.switches import VERL_ROLLOUTS

    assert sorted({name for name, _ in _ROLLOUT_REGISTRY}) == sorted(VERL_ROLLOUTS)
    assert {mode for _, mode in _ROLLOUT_REGISTRY} == {"async"}


@pytest.mark.parametrize(("env", "extra", "environ", "message"), [
    ({"ROLLOUT_BACKEND": "sglang"}, [], {"SGLANG_IS_FLASHINFER_AVAILABLE": "false"},
     "ROLLOUT_BACKEND=sglang: verl starts SGLang 0.5.12 with attention_backend=flashinfer unless told otherwise, but "
     "SGLANG_IS_FLASHINFER_AVAILABLE=false; add "
     "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton"),
    ({"ROLLOUT_BACKEND": "sglang", "LORA_TARGET_MODULES": "q_proj"}, [], {},
     "LORA_TARGET_MODULES (actor_rollout_ref.model.target_modules=q_proj): SGLang serves LoRA only for all-linear"),
    ({"NNODES": "2", "N_GPUS_PER_NODE": "8"}, [], {},
     "NNODES (trainer.nnodes=2) > 1 needs a Ray cluster over the nodes, but RAY_ADDRESS is unset"),
    ({}, ["+ray_kwargs.ray_init.num_cpus=64"], HEAD,
     "ray_kwargs.ray_init.num_cpus=64: RAY_ADDRESS=10.0.0.1:6379 makes ray.init join that cluster"),
    ({}, ["actor_rollout_ref.rollout.name=hf"], {},
     "ROLLOUT_BACKEND (actor_rollout_ref.rollout.name=hf): verl 0.9.1 builds only vllm, sglang, trtllm rollouts"),
    ({"N_GPUS_PER_NODE": "3", "TENSOR_PARALLEL_SIZE": "2"}, [], {},
     "TENSOR_PARALLEL_SIZE (actor_rollout_ref.rollout.tensor_model_parallel_size=2) must divide N_GPUS_PER_NODE"),
    ({"USE_DYNAMIC_BSZ": "0", "TRAIN_BATCH_SIZE": "8", "PPO_MINI_BATCH_SIZE": "16"}, [], {},
     "verl's validate_config rejects the config: ValueError: train_batch_size (8) must be >= "
     "actor.ppo_mini_batch_size (16)"),
])  # fmt: skip
def test_preflight_stops_switch_combinations_verl_would_fail_on(env, extra, environ, message):
    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", *extra, RUN_PROFILE="smoke", **env)))
    problems = check_ppo(cfg, check_imports=False, environ=environ)
    assert any(message in p for p in problems), problems


def test_sglang_with_the_attention_override_passes():
    argv = dry_run("openspiel-ppo.sh", "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton",
                   RUN_PROFILE="smoke", ROLLOUT_BACKEND="sglang")
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert check_ppo(cfg, check_imports=False, environ={"SGLANG_IS_FLASHINFER_AVAILABLE": "false"}) == []
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend == "triton"


@pytest.mark.parametrize(("variable", "value", "choices"), [
    ("ROLLOUT_BACKEND", "vlm", "vllm sglang"), ("FSDP_STRATEGY", "fsdp3", "fsdp2 fsdp"), ("ENABLE_LORA", "yes", "1 0"),
    ("FUSED_KERNELS_BACKEND", "liger", "torch triton"), ("ROLLOUT_LOG_PROBS", "no", "0 1"),
    ("BYPASS_OLD_LOG_PROB", "yes", "0 1"),
])  # fmt: skip
def test_switch_values_are_checked(variable, value, choices):
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                            text=True, env={**os.environ, variable: value})  # fmt: skip
    assert result.returncode == 2 and f"{variable} must be one of: {choices}; got '{value}'" in result.stderr


def test_fsdp1_lora_with_an_unmerged_adapter_is_refused_before_peft_0_22():
    """FSDP1 + LoRA served as an adapter hangs at the first weight sync with PEFT 0.21 (the GPU wheelhouse's) and
    works from PEFT 0.22 (tests/test_fsdp1_lora_sync.py): the pre-flight check refuses it by the PEFT installed."""
    from verl_ext.launch.preflight import fsdp1_unmerged_adapter_problems

    unmerged = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", FSDP_STRATEGY="fsdp",
                                                           ROLLOUT_LORA_MERGE="0", RUN_PROFILE="smoke")))
    (problem,) = fsdp1_unmerged_adapter_problems(unmerged, "0.21.0")
    assert "ROLLOUT_LORA_MERGE=0 (actor_rollout_ref.model.lora.merge=False) with FSDP_STRATEGY=fsdp" in problem
    assert "with PEFT 0.21.0" in problem and "or PEFT >= 0.22" in problem
    assert "ROLLOUT_LORA_MERGE=1 (the default), FSDP_STRATEGY=fsdp2, ENABLE_LORA=0" in problem
    assert fsdp1_unmerged_adapter_problems(unmerged, "0.22.0") == []
    assert fsdp1_unmerged_adapter_problems(unmerged, None) == []  # no PEFT: no LoRA run gets this far
    for settings in ({"ROLLOUT_LORA_MERGE": "1"}, {"ENABLE_LORA": "0"}, {"FSDP_STRATEGY": "fsdp2"}):
        cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                          **{"FSDP_STRATEGY": "fsdp", "ROLLOUT_LORA_MERGE": "0",
                                                             **settings})))
        assert fsdp1_unmerged_adapter_problems(cfg, "0.21.0") == [], settings


def test_lora_merge_switch_is_checked_and_ignored_without_lora():
    assert "actor_rollout_ref.model.lora.merge=True" not in dry_run("openspiel-ppo.sh", ROLLOUT_LORA_MERGE="1",
                                                                    ENABLE_LORA="0", RUN_PROFILE="smoke")
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                            text=True, env={**os.environ, "ROLLOUT_LORA_MERGE": "yes"})
    assert result.returncode == 2 and "ROLLOUT_LORA_MERGE must be one of: 0 1; got 'yes'" in result.stderr


@pytest.mark.parametrize("mode, kl", [("game", 0.1), ("mixed", 0.1), ("move", None)])
def test_whole_games_get_a_kl_anchor_by_default(mode, kl):
    """TASK_MODE=game/mixed: a KL loss of 0.1 against the starting model unless KL_LOSS_COEF says otherwise (without
    it 100 whole-game steps collapsed, docs/training.md); single moves keep none (no reference pass)."""
    config = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", TASK_MODE=mode)))
    actor = config.actor_rollout_ref.actor
    assert actor.use_kl_loss is (kl is not None)
    if kl is not None:
        assert actor.kl_loss_coef == pytest.approx(kl) and actor.kl_loss_type == "low_var_kl"
    off = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", TASK_MODE=mode,
                                                       KL_LOSS_COEF="0")))
    assert off.actor_rollout_ref.actor.use_kl_loss is False
