"""Pre-flight checks the train scripts run before Ray starts: minutes saved per mistake.

``python -m verl_ext.launch.preflight --config-name ppo_trainer -- <hydra overrides>`` composes verl's
own Hydra config with the overrides (a misspelt or removed key fails here) and checks the batch
arithmetic, the rollout backend and our env settings. Messages name the script variable to change.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from ..patches.replay_buffer import sampler_problems
from .loggers import config_problems as logger_problems
from .switches import check_attention, check_switches

# override key -> the variable the train scripts set it from
SCRIPT_VARIABLE = {
    "data.train_batch_size": "TRAIN_BATCH_SIZE",
    "actor_rollout_ref.rollout.n": "ROLLOUT_N",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "PPO_MINI_BATCH_SIZE",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "MICRO_BATCH_SIZE_PER_GPU",
    "trainer.n_gpus_per_node": "N_GPUS_PER_NODE",
    "trainer.nnodes": "NNODES",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "TENSOR_PARALLEL_SIZE",
    "actor_rollout_ref.rollout.name": "ROLLOUT_BACKEND",
    "actor_rollout_ref.model.path": "MODEL_PATH",
    "data.max_prompt_length": "MAX_PROMPT_LENGTH",
    "data.max_response_length": "MAX_RESPONSE_LENGTH",
    "data.train_batch_size@sft": "SFT_BATCH_SIZE",
    "data.micro_batch_size_per_gpu": "MICRO_BATCH_SIZE_PER_GPU",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "MAX_TOKEN_LEN_PER_GPU",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "MAX_TOKEN_LEN_PER_GPU",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "MAX_TOKEN_LEN_PER_GPU",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "TASK_MODE",
}


class PreflightError(ValueError):
    """A setting would fail (or silently misbehave) once the run starts."""


def name(key: str, value: Any) -> str:
    """`VARIABLE (key=value)` for keys the scripts set from a variable, else `key=value`."""
    variable = SCRIPT_VARIABLE.get(key)
    return f"{variable} ({key}={value})" if variable else f"{key}={value}"


def compose(config_name: str, overrides: list[str]):
    """verl's own Hydra config (verl/trainer/config/<config_name>.yaml) with ``overrides`` applied."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        try:
            return hydra_compose(config_name=config_name, overrides=list(overrides))
        except Exception as err:  # hydra's errors name the bad override; keep them, drop the stack
            raise PreflightError(f"verl's config rejects the overrides: {err}") from None


def _int(cfg: Any, key: str) -> int:
    from omegaconf import OmegaConf

    return int(OmegaConf.select(cfg, key))


def check_ppo(cfg: Any, check_imports: bool = True, environ: Mapping[str, str] | None = None) -> list[str]:
    """Problems with a composed ``ppo_trainer`` config (empty list: good to go). ``check_imports``: also check
    what only the GPU machine has (the rollout backend installed, GPUs visible); ``environ``: default os.environ."""
    problems: list[str] = []
    bs, n = _int(cfg, "data.train_batch_size"), _int(cfg, "actor_rollout_ref.rollout.n")
    mini = _int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    micro = cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    gpus = _int(cfg, "trainer.n_gpus_per_node") * _int(cfg, "trainer.nnodes")
    tp = _int(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    gpu_names = (f"{name('trainer.n_gpus_per_node', cfg.trainer.n_gpus_per_node)} x "
                 f"{name('trainer.nnodes', cfg.trainer.nnodes)}")
    if bs % mini:
        problems.append(f"{name('data.train_batch_size', bs)} must be a multiple of "
                        f"{name('actor_rollout_ref.actor.ppo_mini_batch_size', mini)}")
    if (bs * n) % gpus:
        problems.append(f"the rollout batch {name('data.train_batch_size', bs)} x "
                        f"{name('actor_rollout_ref.rollout.n', n)} = {bs * n} must divide by the GPU count "
                        f"{gpu_names} = {gpus}")
    if (mini * n) % gpus:
        problems.append(f"{name('actor_rollout_ref.actor.ppo_mini_batch_size', mini)} x ROLLOUT_N = {mini * n} "
                        f"must divide by the GPU count {gpus}")
    elif (micro is not None and not cfg.actor_rollout_ref.actor.use_dynamic_bsz
          and ((mini * n) // gpus) % int(micro)):
        problems.append(f"{name('actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu', micro)} must divide the "
                        f"per-GPU mini batch {(mini * n) // gpus} (PPO_MINI_BATCH_SIZE x ROLLOUT_N / GPUs)")
    seq_len = _int(cfg, "data.max_prompt_length") + _int(cfg, "data.max_response_length")
    for role in ("actor", "rollout", "ref"):
        node = cfg.actor_rollout_ref[role]
        dynamic_key = "use_dynamic_bsz" if role == "actor" else "log_prob_use_dynamic_bsz"
        budget_key = "ppo_max_token_len_per_gpu" if role == "actor" else "log_prob_max_token_len_per_gpu"
        if node.get(dynamic_key) and node.get(budget_key) is not None and int(node[budget_key]) < seq_len:
            problems.append(f"{name(f'actor_rollout_ref.{role}.{budget_key}', node[budget_key])} "
                            f"must hold one whole sequence: max_prompt_length + max_response_length = {seq_len}")
    if _int(cfg, "trainer.n_gpus_per_node") % tp:
        problems.append(f"{name('actor_rollout_ref.rollout.tensor_model_parallel_size', tp)} must divide "
                        f"{name('trainer.n_gpus_per_node', cfg.trainer.n_gpus_per_node)}")
    backend = str(cfg.actor_rollout_ref.rollout.name)
    if check_imports and backend in ("vllm", "sglang") and importlib.util.find_spec(backend) is None:
        problems.append(f"{name('actor_rollout_ref.rollout.name', backend)}: the {backend} package is not "
                        f"installed; pip install 'verl-ext[{backend}]' or choose the other backend")
    problems += _check_model(cfg.actor_rollout_ref.model.path,
                             _int(cfg, "data.max_prompt_length") + _int(cfg, "data.max_response_length"))
    if cfg.data.custom_cls.get("path") == "pkg://verl_ext.dataset":
        problems += _check_envs(cfg)
    problems += sampler_problems(cfg)
    problems += check_switches(cfg, os.environ if environ is None else environ, check_imports)
    if check_imports:  # a logger verl would import only once the trainer starts (LOGGERS, or an override)
        problems += logger_problems(cfg.trainer.get("logger"), (os.environ if environ is None else environ)
                                    .get("LOGGER_CHECK", "fallback"))
    if check_imports:  # the GPU's memory is only known on the GPU machine
        from verl_ext.launch.memory import check_resident_rollout

        problems += check_resident_rollout(cfg)
    if check_imports:  # the PEFT that will run
        from verl_ext.patches.registry import installed

        problems += fsdp1_unmerged_adapter_problems(cfg, installed("peft"))
    return problems


# The first PEFT whose get_peft_model_state_dict finds the adapter under verl's nested FSDP1 units
# (tests/test_fsdp1_lora_sync.py: PEFT 0.21 collects 0 of 28 adapter tensors, 0.22 all 28 with the adapter's values).
FSDP1_UNMERGED_ADAPTER_PEFT = "0.22"


def fsdp1_unmerged_adapter_problems(cfg: Any, peft_version: str | None) -> list[str]:
    """FSDP1 + LoRA served unmerged with a PEFT before 0.22: verl collects an empty adapter, vLLM's add_lora raises
    StopIteration and verl waits for the weight sync forever (H100, docs/runs/2026-11-24-h100-speed-merge/)."""
    from packaging.version import Version

    model = cfg.actor_rollout_ref.model
    lora = model.get("lora") or {}
    if (peft_version is None or str(cfg.actor_rollout_ref.actor.strategy) != "fsdp"
            or not int(model.get("lora_rank") or 0) or lora.get("merge", False)):
        return []
    if Version(peft_version) >= Version(FSDP1_UNMERGED_ADAPTER_PEFT):
        return []
    return [f"ROLLOUT_LORA_MERGE=0 (actor_rollout_ref.model.lora.merge=False) with FSDP_STRATEGY=fsdp and "
            f"ENABLE_LORA=1 hangs at the first weight sync with PEFT {peft_version} (verl collects no adapter "
            f"tensors from FSDP1 before PEFT {FSDP1_UNMERGED_ADAPTER_PEFT}; docs/training.md). Use "
            f"ROLLOUT_LORA_MERGE=1 (the default), FSDP_STRATEGY=fsdp2, ENABLE_LORA=0, or PEFT >= "
            f"{FSDP1_UNMERGED_ADAPTER_PEFT}."]


def check_sft(cfg: Any) -> list[str]:
    """Problems with a composed ``sft_trainer_engine`` config."""
    problems = []
    for key in ("train_files", "val_files"):
        path = cfg.data.get(key)
        if path and not Path(str(path)).is_file():
            problems.append(f"data.{key}: no such file {path!r} (make it with `verl-ext export --format sft`)")
    problems += _check_model(cfg.model.path, _int(cfg, "data.max_length"))
    problems += check_attention(cfg.model, "model", check_imports=True)
    problems += logger_problems(cfg.trainer.get("logger"), os.environ.get("LOGGER_CHECK", "fallback"))
    return problems


def sft_warnings(cfg: Any) -> list[str]:
    """What a composed ``sft_trainer_engine`` config would run without saying so: verl's SFT validates in whole
    batches of ``data.train_batch_size`` rows (drop_last), so a validation file with fewer rows logs no
    validation loss at all (a tic_tac_toe cold start with 64 validation rows at batches of 128, 2026-12-07)."""
    path = cfg.data.get("val_files")
    if not path or not Path(str(path)).is_file():
        return []
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(str(path)).metadata.num_rows
    batch = _int(cfg, "data.train_batch_size")
    if rows >= batch:
        return []
    return [f"data.val_files has {rows} rows, fewer than SFT_BATCH_SIZE (data.train_batch_size={batch}): verl's SFT "
            f"validates in whole batches and drops the rest, so this run logs no validation loss (lower "
            f"SFT_BATCH_SIZE to {rows} or less, or export more validation rows: val_tasks_per_case)"]


def _check_model(path: Any, max_tokens: int) -> list[str]:
    path = str(path)
    local = Path(os.path.expanduser(path))
    if not local.exists():
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            return [f"{name('actor_rollout_ref.model.path', path)}: not a local folder and HF_HUB_OFFLINE=1"]
        return []  # a hub id: downloaded by verl at start
    if not (local / "config.json").is_file():
        return [f"{name('actor_rollout_ref.model.path', path)}: folder has no config.json"]
    config = json.loads((local / "config.json").read_text())
    limit = config.get("max_position_embeddings")
    if limit and max_tokens > int(limit):
        return [f"MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH = {max_tokens} exceeds the model's "
                f"max_position_embeddings={limit}"]
    return []


def _check_envs(cfg: Any) -> list[str]:
    from ..envs.config import ConfigError
    from ..mixture import EnvMixture, parse_split

    try:
        parse_split(cfg.data.train_files)
        parse_split(cfg.data.val_files)
        mixture = EnvMixture(cfg.data.get("env"))
    except ConfigError as err:
        return [str(err)]
    return _check_game_loop(cfg) if mixture.has_games else []


def _check_game_loop(cfg: Any) -> list[str]:
    """Full-game rows need verl to know the game agent loop (else every rollout fails on an unknown agent_name)."""
    from omegaconf import OmegaConf

    from ..games import AGENT_LOOP_CONFIG, GAME_AGENT_NAME

    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    path = OmegaConf.select(cfg, key)
    hint = f"set it to {AGENT_LOOP_CONFIG} (TASK_MODE=game or mixed in openspiel-ppo.sh does)"
    if not path:
        return [f"full-game rows (data.env.openspiel.task_mode) need {key}: {hint}"]
    if not Path(str(path)).is_file():
        return [f"{name(key, path)}: no such file; {hint}"]
    try:
        entries = {str(e.get("name")): e for e in OmegaConf.load(str(path))}
    except Exception as err:
        return [f"{name(key, path)}: cannot read it as a YAML list of agent loops: {err}"]
    entry = entries.get(GAME_AGENT_NAME)
    if entry is None:
        return [f"{name(key, path)}: registers no {GAME_AGENT_NAME!r} agent loop; {hint}"]
    module, _, attr = str(entry.get("_target_", "")).rpartition(".")
    try:
        getattr(importlib.import_module(module), attr)
    except Exception as err:  # ImportError, AttributeError, or an error raised while importing verl's agent loop
        return [f"{name(key, path)}: agent loop {entry.get('_target_')!r} does not import: {err}"]
    return []


def main(argv: list[str] | None = None) -> int:
    """Compose, check, print each problem; exit status 2 on any problem or import failure, else 0."""
    parser = argparse.ArgumentParser(prog="python -m verl_ext.launch.preflight", description=__doc__)
    parser.add_argument("--config-name", default="ppo_trainer", choices=["ppo_trainer", "sft_trainer_engine"])
    parser.add_argument("--no-import-check", action="store_true", help="skip checking that vllm/sglang import")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    try:
        cfg = compose(args.config_name, args.overrides)
        problems = check_ppo(cfg, not args.no_import_check) if args.config_name == "ppo_trainer" else check_sft(cfg)
    except PreflightError as err:
        print(f"pre-flight: {err}", file=sys.stderr)
        return 2
    except ImportError as err:  # verl (or a package it needs) is found but does not import: name it, no traceback
        version = ".".join(str(part) for part in sys.version_info[:3])
        print(f"pre-flight: {sys.executable} (Python {version}) found verl but an import failed: "
              f"{type(err).__name__}: {err}", file=sys.stderr)
        print("  Repair that environment (README \"GPU node quick start\"), or point PYTHON=/path/to/venv/bin/python "
              "at one where verl-ext is installed.", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"pre-flight: {problem}", file=sys.stderr)
    if args.config_name == "sft_trainer_engine":
        for warning in sft_warnings(cfg):
            print(f"pre-flight: warning: {warning}", file=sys.stderr)
    if not problems:
        print("pre-flight: ok")
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
