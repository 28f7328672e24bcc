"""Pre-flight checks for the documented switches (ROLLOUT_BACKEND, ENABLE_LORA, FSDP_STRATEGY, N_GPUS_PER_NODE,
TENSOR_PARALLEL_SIZE, NNODES) against what verl 0.9.1 does with them at run time.

Each check points at the verl 0.9.1 code that would fail (or silently misbehave) minutes after the start:

- verl's own ``validate_config`` (verl/utils/config.py:88), the first thing ``main_ppo`` runs after Hydra.
- rollout names verl can build (verl/workers/rollout/base.py:89-93).
- SGLang: verl asks SGLang >= 0.5.12 for the FlashInfer attention backend unless
  ``engine_kwargs.sglang.attention_backend`` is given (workers/rollout/sglang_rollout/async_sglang_server.py:289-297),
  and serves LoRA only for ``all-linear`` or a list of module names (sglang_rollout/utils.py:93-102).
- the actor's attention: ``torch_varlen`` needs ``verl_ext.patches.attention`` in ``external_lib`` (imported by verl's
  model config in each worker, verl/workers/config/model.py:149), flash-attn's names need flash-attn.
- Ray: ``main_ppo`` calls ``ray.init(**ray_kwargs.ray_init)``, which joins the cluster in ``RAY_ADDRESS`` and
  otherwise starts a one-node cluster (trainer/main_ppo.py:57-74); joining refuses ``num_cpus``
  (ray/_private/worker.py:1936); too few GPUs stop verl's resource pool after Ray has started
  (single_controller/ray/base.py:226-241).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import warnings
from contextlib import redirect_stdout
from typing import Any, Mapping

from omegaconf import open_dict

# verl/workers/rollout/base.py:89-93 (_ROLLOUT_REGISTRY); tests/test_train_scripts.py checks they still agree
VERL_ROLLOUTS = ("vllm", "sglang", "trtllm")
SGLANG_FLASHINFER_FLAG = "SGLANG_IS_FLASHINFER_AVAILABLE"
ATTENTION_OVERRIDE = "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton"


def check_switches(cfg: Any, environ: Mapping[str, str], check_imports: bool = True) -> list[str]:
    """Problems of a composed ``ppo_trainer`` config with the switches above (empty: none found)."""
    problems = check_rollout(cfg, environ, check_imports)
    problems += check_old_log_probs(cfg)
    problems += check_attention(cfg.actor_rollout_ref.model, "actor_rollout_ref.model", check_imports)
    problems += check_ray(cfg, environ, check_imports)
    problems += check_patch_versions(cfg)
    problems += verl_validate(cfg)
    return problems


def patch_modules(cfg: Any) -> list[str]:
    """The modules of verl-ext's patches a composed config loads: ``VERL_USE_EXTERNAL_MODULES`` in the job's
    runtime_env, the model config's ``external_lib`` and the v1 trainer's custom sampler."""
    from verl_ext.patches.registry import BY_MODULE

    env_vars = ((((cfg.get("ray_kwargs") or {}).get("ray_init") or {}).get("runtime_env") or {}).get("env_vars") or {})
    names = [m.strip() for m in str(env_vars.get("VERL_USE_EXTERNAL_MODULES") or os.environ.get(
        "VERL_USE_EXTERNAL_MODULES", "")).split(",")]
    libs = cfg.actor_rollout_ref.model.get("external_lib") or []
    names += [str(libs)] if isinstance(libs, str) else [str(lib) for lib in libs]
    sampler = ((((cfg.get("trainer") or {}).get("v1") or {}).get("sampler") or {}).get("custom_sampler") or {})
    names.append(str(sampler.get("path") or "").removeprefix("pkg://"))
    return [name for name in dict.fromkeys(names) if name in BY_MODULE]


def check_patch_versions(cfg: Any) -> list[str]:
    """Each patch the config loads must have been written for the installed verl / vLLM (verl_ext/patches/registry.py):
    a refusal names the switch that turns the patch off, before Ray starts."""
    from verl_ext.patches.registry import BY_MODULE, version_problems

    return [problem for module in patch_modules(cfg) for problem in version_problems(BY_MODULE[module])]


def check_old_log_probs(cfg: Any) -> list[str]:
    """Bypass mode trains on the rollout's log-probs as the old log-probs, so the rollout must return them."""
    correction = cfg.algorithm.get("rollout_correction") or {}
    if correction.get("bypass_mode") and not cfg.actor_rollout_ref.rollout.get("calculate_log_probs", True):
        return ["ROLLOUT_LOG_PROBS=0 (actor_rollout_ref.rollout.calculate_log_probs=False) with BYPASS_OLD_LOG_PROB=1 "
                "(algorithm.rollout_correction.bypass_mode=True): bypass mode trains on the rollout's log-probs; "
                "set BYPASS_OLD_LOG_PROB=0 (the actor recomputes them) or ROLLOUT_LOG_PROBS=1"]
    return []


def check_rollout(cfg: Any, environ: Mapping[str, str], check_imports: bool) -> list[str]:
    """The rollout engine verl would build, and what SGLang needs from the config."""
    rollout, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
    name = str(rollout.name)
    if name not in VERL_ROLLOUTS:
        return [f"ROLLOUT_BACKEND (actor_rollout_ref.rollout.name={name}): verl 0.9.1 builds only "
                f"{', '.join(VERL_ROLLOUTS)} rollouts"]
    if name != "sglang":
        return []
    problems = []
    targets = model.get("target_modules")
    if int(model.get("lora_rank") or 0) > 0 and isinstance(targets, str) and targets != "all-linear":
        problems.append(f"LORA_TARGET_MODULES (actor_rollout_ref.model.target_modules={targets}): SGLang serves "
                        "LoRA only for all-linear or a list of module names, e.g. LORA_TARGET_MODULES=[q_proj,v_proj]")
    engine_kwargs = (rollout.get("engine_kwargs") or {}).get("sglang") or {}
    if engine_kwargs.get("attention_backend") is None:
        flag_off = str(environ.get(SGLANG_FLASHINFER_FLAG, "true")).strip().lower() in ("0", "false", "no", "off")
        absent = check_imports and importlib.util.find_spec("flashinfer") is None
        if flag_off or absent:
            why = f"{SGLANG_FLASHINFER_FLAG}={environ.get(SGLANG_FLASHINFER_FLAG)}" if flag_off else \
                "flashinfer is not installed"
            problems.append(f"ROLLOUT_BACKEND=sglang: verl starts SGLang 0.5.12 with attention_backend=flashinfer "
                            f"unless told otherwise, but {why}; add {ATTENTION_OVERRIDE}")
    return problems


def check_attention(model: Any, prefix: str, check_imports: bool) -> list[str]:
    """The actor's attention implementation (ATTN_IMPLEMENTATION) can be built where verl builds the model.

    ``torch_varlen`` exists only after ``verl_ext.patches.attention`` is imported in the worker, which verl does for the
    model config's ``external_lib`` (verl/workers/config/model.py:149); flash-attn's names need the package.
    """
    attn = str((model.get("override_config") or {}).get("attn_implementation", "flash_attention_2"))
    key = f"ATTN_IMPLEMENTATION ({prefix}.override_config.attn_implementation={attn})"
    problems = []
    if attn == "torch_varlen":
        libs = model.get("external_lib")
        libs = [] if libs is None else [libs] if isinstance(libs, str) else list(libs)
        if "verl_ext.patches.attention" not in libs:
            problems.append(f"{key}: {prefix}.external_lib={model.get('external_lib')} does not import "
                            "verl_ext.patches.attention, which registers it; add it (a list keeps your own modules too)")
        if check_imports and importlib.util.find_spec("torch.nn.attention.varlen") is None:
            problems.append(f"{key} needs torch.nn.attention.varlen (PyTorch >= 2.10); use ATTN_IMPLEMENTATION=sdpa")
    elif attn.startswith("flash_attention") and check_imports and importlib.util.find_spec("flash_attn") is None:
        problems.append(f"{key} needs the flash-attn package, which is not installed; use "
                        "ATTN_IMPLEMENTATION=torch_varlen (PyTorch's own varlen kernel) or sdpa")
    return problems


def check_ray(cfg: Any, environ: Mapping[str, str], check_imports: bool) -> list[str]:
    """How main_ppo's ray.init will go: join RAY_ADDRESS's cluster, or start a one-node one."""
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    address = environ.get("RAY_ADDRESS", "")
    ray_init = cfg.get("ray_kwargs", {}).get("ray_init", {})
    problems = []
    if address and ray_init.get("num_cpus") is not None:
        problems.append(f"ray_kwargs.ray_init.num_cpus={ray_init.get('num_cpus')}: RAY_ADDRESS={address} makes "
                        "ray.init join that cluster, and joining refuses num_cpus; leave it null")
    if nnodes > 1 and not address:
        problems.append(f"NNODES (trainer.nnodes={nnodes}) > 1 needs a Ray cluster over the nodes, but RAY_ADDRESS is "
                        "unset: verl would start a one-node cluster and stop with 'Total available GPUs ... is less "
                        "than total desired GPUs'; run through train/slurm/multinode.sbatch (it starts the cluster "
                        "and sets RAY_ADDRESS)")
    if check_imports and not address and nnodes == 1:
        visible = _visible_gpus()
        if visible is not None and 0 < visible < per_node:
            problems.append(f"N_GPUS_PER_NODE (trainer.n_gpus_per_node={per_node}) > the {visible} GPU(s) this node "
                            f"shows (CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    return problems


def _visible_gpus() -> int | None:
    """GPUs torch sees here, or None without CUDA (a CPU machine: nothing to compare)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.device_count() if torch.cuda.is_available() else None


def verl_validate(cfg: Any) -> list[str]:
    """verl's own ``validate_config`` (main_ppo runs it first), its failures as problems.

    Its last step rounds a LoRA rank to vLLM's allowed ranks by importing vLLM; where vLLM is not installed
    (CPU machines) that single step is left out by validating a copy with ``lora_rank=0`` (the missing backend
    itself is reported by the import check on the GPU machine).
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    lora_rank = int(cfg.actor_rollout_ref.model.get("lora_rank") or 0)
    if str(cfg.actor_rollout_ref.rollout.name) == "vllm" and lora_rank > 0 and importlib.util.find_spec("vllm") is None:
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            cfg.actor_rollout_ref.model.lora_rank = 0
    try:
        with warnings.catch_warnings(), open(os.devnull, "w") as devnull:
            warnings.simplefilter("ignore")  # "Disabled critic as algorithm.adv_estimator != gae": expected for GRPO
            with redirect_stdout(devnull):  # its "[validate_config] All configuration checks passed" line
                validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as err:  # whatever it raises, main_ppo would raise too, minutes later on the GPU node
        return [f"verl's validate_config rejects the config: {type(err).__name__}: {err}"]
    return []

