# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are read by the sourcing scripts (TASK_NAME, LAUNCHER, ...)
# Shared by the train scripts: .env loading, W&B mode, folders, profiles, the GRPO recipe, dry-run, launch.
# Every knob is an environment variable with a default; every extra argument is a Hydra override.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-python3}"  # one interpreter for the pre-flight, the launcher and (through it) every worker
# The command before `-m <module>`; empty: "$PYTHON", read when launching (so PYTHON from .env counts).
# sft.sh: "$PYTHON" -m torch.distributed.run ... (torchrun's workers then run that same interpreter).
LAUNCHER=()
COMMAND_HINT="bash $0"  # how the user ran us, repeated in the interpreter check's advice
SCRIPT_STARTED="${EPOCHREALTIME:-$(date +%s)}"  # start-up is timed from here (bench/startup/startup_breakdown.py)

# .env holds secrets (HF_TOKEN, WANDB_API_KEY): exported to the run, never printed.
load_dotenv() {
  if [[ -f "$REPO_ROOT/.env" ]]; then
    set -a
    # shellcheck disable=SC1091
    source "$REPO_ROOT/.env"
    set +a
  fi
  if [[ -z "${WANDB_API_KEY:-}" && -z "${WANDB_MODE:-}" ]]; then
    export WANDB_MODE=offline  # no key: log locally, sync later with `wandb sync`
  fi
}

# --dry-run anywhere in the arguments prints the command instead of running it.
split_flags() {
  DRY_RUN=0
  OVERRIDES=()
  local arg
  for arg in "$@"; do
    if [[ "$arg" == "--dry-run" ]]; then DRY_RUN=1; else OVERRIDES+=("$arg"); fi
  done
}

# Sizes for RUN_PROFILE=smoke (minutes on one GPU) and full (a real run); each can still be overridden.
apply_profile() {
  case "${RUN_PROFILE:=full}" in
    smoke)
      : "${TRAIN_BATCH_SIZE:=16}" "${ROLLOUT_N:=4}" "${PPO_MINI_BATCH_SIZE:=16}" "${MICRO_BATCH_SIZE_PER_GPU:=8}"
      : "${MAX_PROMPT_LENGTH:=1024}" "${MAX_RESPONSE_LENGTH:=64}" "${TOTAL_TRAINING_STEPS:=5}"
      : "${SAVE_FREQ:=5}" "${TEST_FREQ:=-1}" "${NUM_TASKS_PER_CASE:=64}" "${VAL_TASKS_PER_CASE:=8}"
      : "${GPU_MEMORY_UTILIZATION:=0.4}" "${VAL_BEFORE_TRAIN:=False}"
      : "${DATALOADER_WORKERS:=0}" ;;
    full)
      : "${TRAIN_BATCH_SIZE:=128}" "${ROLLOUT_N:=8}" "${PPO_MINI_BATCH_SIZE:=32}" "${MICRO_BATCH_SIZE_PER_GPU:=16}"
      : "${MAX_PROMPT_LENGTH:=1024}" "${MAX_RESPONSE_LENGTH:=512}" "${TOTAL_TRAINING_STEPS:=300}"
      : "${SAVE_FREQ:=50}" "${TEST_FREQ:=25}" "${NUM_TASKS_PER_CASE:=2000}" "${VAL_TASKS_PER_CASE:=32}"
      : "${GPU_MEMORY_UTILIZATION:=0.6}" "${VAL_BEFORE_TRAIN:=True}"
      : "${DATALOADER_WORKERS:=4}" ;;
    *)
      echo "RUN_PROFILE must be smoke or full, got '${RUN_PROFILE}'" >&2
      exit 2 ;;
  esac
}

# Exit 2 naming the variable when its value is not one of the choices: require_choice NAME VALUE CHOICE...
require_choice() {
  local name="$1" value="$2" choice
  shift 2
  for choice in "$@"; do
    if [[ "$value" == "$choice" ]]; then return 0; fi
  done
  echo "$name must be one of: $*; got '$value'" >&2
  exit 2
}

# verl-ext's patches of verl / vLLM internals come from one registry (verl_ext/patches/registry.py, run as a file
# with the standard library only): patch_registry compose|off|list [VAR=VALUE...] runs it with those switch
# values on top of the environment.
patch_registry() {
  local py="$PYTHON" command="$1"
  shift
  command -v "$py" >/dev/null 2>&1 || py=python3  # require_python names a missing interpreter at launch
  env "$@" "$py" "$REPO_ROOT/verl_ext/patches/registry.py" "$command"
}

# PATCHES=off: every patch switch at its off value (verl's own code, verl.trainer.main_ppo with its own pre-flight):
# plain verl for A/B runs and bug reports upstream. A switch set to anything else is refused. on (default): each
# switch's own default.
patches_switch() {
  # a switch removed under issue 46 (its patch did not pay; verl_ext/patches/registry.py REMOVED says why) that is
  # still set stops the run, naming it, instead of being ignored
  patch_registry removed || exit 2
  require_choice PATCHES "${PATCHES:=on}" on off
  [[ "$PATCHES" == on || -n "${patches_switched:-}" ]] && return 0
  patches_switched=1  # once: grpo_args resolves some switches further (ROLLOUT_POLL_INTERVAL=off -> empty)
  local var value
  while IFS='=' read -r var value; do
    if [[ -n "${!var+x}" && "${!var}" != "$value" ]]; then
      echo "PATCHES=off runs plain verl, but $var=${!var} asks for a patch (off: $var=$value). Unset $var or" \
        "drop PATCHES=off." >&2
      exit 2
    fi
    printf -v "$var" '%s' "$value"
  done < <(patch_registry off)
  if [[ "${VERL_USE_EXTERNAL_MODULES:-}" == *verl_ext* ]]; then
    echo "PATCHES=off runs plain verl, but VERL_USE_EXTERNAL_MODULES=$VERL_USE_EXTERNAL_MODULES names verl-ext's" \
      "modules. Unset it or drop PATCHES=off." >&2
    exit 2
  fi
}

# How verl's FSDP engine computes token log-probs, for GRPO and SFT alike: sets remove_padding and fused
# (True/False for Hydra) from USE_REMOVE_PADDING and USE_FUSED_KERNELS, and external_lib (the module that
# registers ATTN_IMPLEMENTATION, or empty).
log_prob_flags() {
  patches_switch  # sft.sh too: PATCHES=off refuses ATTN_IMPLEMENTATION=torch_varlen
  : "${ATTN_IMPLEMENTATION:=sdpa}"
  # verl's fused log-prob kernels: without flash-attn, verl's plain log-prob path loops over every token in
  # Python (measured: 13k log_softmax calls per 13k-token micro batch, 137 s of a 197 s GRPO step at 128x8x512;
  # 2 s of every 2 s SFT step of a 13M model)
  : "${USE_FUSED_KERNELS:=1}"
  # Which of verl's fused kernels: "torch" (verl's default: 512-token chunks, each with its fp32 logits in GPU
  # memory) or "triton" (verl's Triton kernel, verl/utils/kernel/linear_cross_entropy.py: no logits tensor; CUDA
  # only). docs/runs/speed-lab-notes/5-levers.md has the measurements.
  : "${FUSED_KERNELS_BACKEND:=torch}"
  require_choice FUSED_KERNELS_BACKEND "$FUSED_KERNELS_BACKEND" torch triton
  # Padding-free packing pays with a varlen kernel (flash-attn's, or PyTorch's own: torch_varlen, registered by
  # verl_ext.patches.attention); under SDPA the packed row gets a full L x L block mask (measured: 2.4x slower per micro
  # batch than padded rows), so SDPA runs padded rows.
  case "$ATTN_IMPLEMENTATION" in
    flash_attention*|torch_varlen) : "${USE_REMOVE_PADDING:=1}" ;;
    *) : "${USE_REMOVE_PADDING:=0}" ;;
  esac
  # torch_varlen exists once verl_ext.patches.attention is imported in the process that builds the model: verl imports
  # the model config's external_lib there (workers/config/model.py)
  # (the attention patch only: grpo_args adds the LoRA sync patches from its own switches)
  external_lib="$(patch_registry compose ATTN_IMPLEMENTATION="$ATTN_IMPLEMENTATION" ENABLE_LORA=0 |
    sed -n 's/^external_lib=//p')"
  remove_padding=False
  fused=False
  if [[ "$USE_REMOVE_PADDING" == "1" ]]; then remove_padding=True; fi
  if [[ "$USE_FUSED_KERNELS" == "1" ]]; then fused=True; fi
}

# LOGGERS (verl's trainer.logger): every logger must import in $PYTHON, or verl stops minutes in, once the trainer
# starts (verl_ext/launch/loggers.py). LOGGER_CHECK=fallback (default) drops the ones that do not and says which and
# why (nothing left: [console,file]); strict stops here naming the module; off checks nothing. A dry run only looks
# the modules up; a launch imports them (~0.6 s for wandb), which also catches a broken install.
check_loggers() {
  require_choice LOGGER_CHECK "${LOGGER_CHECK:=fallback}" fallback strict off
  [[ "$LOGGER_CHECK" == off ]] && return 0
  command -v "$PYTHON" >/dev/null 2>&1 || return 0  # require_python names a missing interpreter at launch
  local flags=(--mode "$LOGGER_CHECK") resolved rc=0
  [[ "$DRY_RUN" == 1 ]] || flags+=(--import)
  resolved="$("$PYTHON" "$REPO_ROOT/verl_ext/launch/loggers.py" "${flags[@]}" "$LOGGERS")" || rc=$?
  if (( rc == 2 )); then exit 2; fi
  if (( rc != 0 )); then return 0; fi  # an interpreter that cannot run it: require_python says why at launch
  LOGGERS="$resolved"
}

# A Hydra override value that keeps any text as it is: single-quoted, a run of backslashes before a quote or the
# closing quote doubled (Hydra halves those), and "${" escaped from OmegaConf's interpolation.
hydra_quote() {
  local text="$1" out="" run="" ch i
  for (( i = 0; i < ${#text}; i++ )); do
    ch="${text:i:1}"
    if [[ "$ch" == "\\" ]]; then run+="\\"; continue; fi
    if [[ "$ch" == "'" ]]; then
      out+="$run$run\\'"
    elif [[ "$ch" == '$' && "${text:i+1:1}" == "{" ]]; then
      out+="$run$run\\\$"
    else
      out+="$run$ch"
    fi
    run=""
  done
  printf "'%s'" "$out$run$run"
}

# The GRPO recipe: verl main_ppo overrides built from the environment.
grpo_args() {
  patches_switch
  : "${MODEL_PATH:=Qwen/Qwen2.5-0.5B-Instruct}"
  : "${ROLLOUT_BACKEND:=vllm}" "${FSDP_STRATEGY:=fsdp2}" "${ENABLE_LORA:=1}"
  require_choice ROLLOUT_BACKEND "$ROLLOUT_BACKEND" vllm sglang
  require_choice FSDP_STRATEGY "$FSDP_STRATEGY" fsdp2 fsdp
  require_choice ENABLE_LORA "$ENABLE_LORA" 1 0
  : "${LORA_RANK:=32}" "${LORA_ALPHA:=32}" "${LORA_TARGET_MODULES:=all-linear}" "${LORA_ADAPTER_PATH:=}"
  # torch_varlen: padding-free micro batches with PyTorch's own varlen kernel (verl_ext/patches/attention.py); H100,
  # 128 x 8 x 512 with a 32k token budget (64k now, below): update 20-22 s -> 11.9 s, step 0.95x -> 0.71x TRL's
  # (docs/runs/speed-lab-notes/0c-packed-micro-batches.md). sdpa runs padded rows; flash_attention_2 needs flash-attn.
  : "${LAYERED_SUMMON:=0}" "${ATTN_IMPLEMENTATION:=torch_varlen}"
  # Speed defaults, chosen by measurement (docs/training.md "Speed"): CUDA graphs in vLLM, token-budget
  # micro batches, old log-probs recomputed by the actor without asking the rollout for its own, and no
  # reference pass unless KL is on.
  : "${ENFORCE_EAGER:=False}" "${USE_DYNAMIC_BSZ:=1}" "${KL_LOSS_COEF:=0}"
  local kl_on=1
  [[ "$KL_LOSS_COEF" =~ ^0*\.?0*$ ]] && kl_on=0
  # Old log-probs: 0 (default) has the actor compute them (verl's own default, one forward pass over the batch);
  # 1 takes the rollout engine's log-probs instead (verl's bypass mode). Bypass skips that pass but makes vLLM
  # return a log-prob for every sampled token, which costs far more at scale: H100, 128 x 8 x 512, generation
  # 23.4 -> 10.6-11.1 s for a 5.4-5.7 s actor pass, step 36.0 -> 28.1-29.3 s (docs/runs/2026-11-25-h100-log-probs/NOTES.md, section 0i).
  : "${BYPASS_OLD_LOG_PROB:=0}"
  require_choice BYPASS_OLD_LOG_PROB "$BYPASS_OLD_LOG_PROB" 0 1
  # LoRA + KL: verl's reference pass is the actor with its adapter disabled, and PEFT freezes the adapter
  # inside disable_adapter(). If that pass is the first forward (bypass mode skips the old-log-prob pass),
  # FSDP2 fixes its gradient dtypes while no parameter is trainable and the first backward fails ("assign a
  # gradient with dtype BFloat16 to a tensor with grad_dtype Float"; tests/test_fsdp2_lora_first_forward.py).
  if [[ "$ENABLE_LORA" == "1" && "$kl_on" == "1" && "$BYPASS_OLD_LOG_PROB" == "1" ]]; then
    echo "BYPASS_OLD_LOG_PROB=1 with ENABLE_LORA=1 and KL_LOSS_COEF=$KL_LOSS_COEF fails at the first backward" \
      "(verl's reference pass runs first with the adapter frozen; docs/training.md). Use BYPASS_OLD_LOG_PROB=0" \
      "(the default), KL_LOSS_COEF=0, or ENABLE_LORA=0." >&2
    exit 2
  fi
  # The sampled tokens' log-probs from vLLM/SGLang (rollout.calculate_log_probs): by default only when bypass
  # mode trains on them. Without bypass they only feed verl's rollout-vs-actor comparison metrics
  # (training/rollout_probs_diff_*); ROLLOUT_LOG_PROBS=1 brings those back at the generation cost above.
  : "${ROLLOUT_LOG_PROBS:=$BYPASS_OLD_LOG_PROB}"
  require_choice ROLLOUT_LOG_PROBS "$ROLLOUT_LOG_PROBS" 0 1
  if [[ "$BYPASS_OLD_LOG_PROB" == "1" && "$ROLLOUT_LOG_PROBS" == "0" ]]; then
    echo "ROLLOUT_LOG_PROBS=0 with BYPASS_OLD_LOG_PROB=1: bypass mode trains on the rollout's log-probs as the old" \
      "log-probs (verl fails at step 1 without them). Use BYPASS_OLD_LOG_PROB=0 (the actor recomputes them)" \
      "or ROLLOUT_LOG_PROBS=1." >&2
    exit 2
  fi
  # The actor's old-log-prob pass before each update. auto: skipped when the update is one mini-batch for one
  # epoch (PPO_MINI_BATCH_SIZE >= TRAIN_BATCH_SIZE, ppo_epochs=1), where the old log-probs are the update's own,
  # detached (ratio 1, as TRL's num_iterations=1; verl_ext/patches/on_policy_update.py, which keeps the pass whenever
  # something else needs it and says why); always: verl's pass every step.
  : "${OLD_LOG_PROB_PASS:=auto}"
  require_choice OLD_LOG_PROB_PASS "$OLD_LOG_PROB_PASS" auto always
  # Per-step learning-signal and collapse metrics (signal/*, collapse/* in each step's metrics) and their console
  # warnings (verl_ext/patches/step_signal.py; docs/training.md "Learning signal and collapse"). warn: metrics and warnings;
  # abort: also stops the run after its first step when (almost) no GRPO group has rewards that differ; off: neither.
  : "${SIGNAL_CHECK:=warn}"
  require_choice SIGNAL_CHECK "$SIGNAL_CHECK" warn abort off
  # zero: a GRPO group whose rewards are all equal gets advantage 0 (verl_ext/patches/tied_groups.py). verl 0.9.1 divides
  # such a group's float32 rounding residue by std + 1e-6: up to 0.106 per reply on connect_four's engine rewards
  # (docs/runs/2026-11-27-cpu-advantage-pull/). verl: verl's own numbers.
  : "${GRPO_TIED_GROUPS:=zero}"
  require_choice GRPO_TIED_GROUPS "$GRPO_TIED_GROUPS" zero verl
  # on: whole-game rows whose game.move_credit is above 0 get an advantage per reply for keeping the position's value
  # (verl_ext/patches/move_credit.py; inert while game.move_credit is 0, its default). off: verl's advantages only.
  : "${MOVE_CREDIT:=on}"
  require_choice MOVE_CREDIT "$MOVE_CREDIT" on off
  # Where verl's fused LM head computes logits and log-probs. response: only the positions that predict a response
  # token, the only ones any loss or metric reads (TRL's logits_to_keep; verl_ext/patches/response_logits.py): H100 smoke
  # update 0.553 / 0.651 -> 0.479 / 0.476 s in two pairs, the head alone 0.132 -> 0.040 s per 13k-token micro batch
  # (docs/runs/2026-11-26-h100-lm-head/NOTES.md, section 0r). all: every packed token, prompts included (verl's). Needs USE_FUSED_KERNELS=1 with the
  # torch backend (else verl's head runs as before).
  : "${LM_HEAD_POSITIONS:=response}"
  require_choice LM_HEAD_POSITIONS "$LM_HEAD_POSITIONS" all response
  # layers: torch.compile each decoder layer of verl's FSDP2 actor (verl_ext/patches/compiled_layers.py); the first update
  # compiles them (46-65 s at the smoke load, ~95 s at the realistic one). H100 (docs/runs/2026-11-26-h100-compile/NOTES.md, section 0s): realistic update
  # 10.3 -> 8.55 s in one pair, no smoke gain in four, so not a default. off: verl's eager layers.
  : "${ACTOR_COMPILE:=off}"
  require_choice ACTOR_COMPILE "$ACTOR_COMPILE" off layers
  if [[ "$ACTOR_COMPILE" == layers && "$FSDP_STRATEGY" != fsdp2 ]]; then
    echo "ACTOR_COMPILE=layers compiles FSDP2's decoder layers; FSDP_STRATEGY=$FSDP_STRATEGY. Use FSDP_STRATEGY=fsdp2" \
      "or ACTOR_COMPILE=off." >&2
    exit 2
  fi
  # 1: freeze the Python heap start-up built in verl's actor worker (after its model build and its first update)
  # and in the trainer (when training begins), so that Python's full garbage collections stop walking it: one took
  # 0.24-0.37 s in a process with verl's worker imports, ~1 ms with the heap frozen (bench/micro/gc_pause_bench.py), and
  # the H100 smoke runs' update jumped 0.4-0.6 s at steps 3 and 12-13 (verl_ext/patches/gc_freeze.py). 0: Python's default.
  # watch: report collections of 0.05 s or longer without freezing (a diagnostic).
  : "${GC_FREEZE:=1}"
  require_choice GC_FREEZE "$GC_FREEZE" 0 1 watch
  : "${GRADIENT_CHECKPOINTING:=1}" "${ACTOR_MODEL_DTYPE:=fp32}"
  : "${N_GPUS_PER_NODE:=1}" "${NNODES:=1}" "${TENSOR_PARALLEL_SIZE:=1}"
  # off: on one GPU, verl's LoRA actor is a plain module instead of FSDP2 units (verl_ext/patches/unsharded_actor.py): the
  # same bf16 compute and fp32 adapter gradients (equal bit for bit on the CPU) without FSDP2's per-layer all-gather,
  # free and gradient copies. H100 smoke load (docs/runs/2026-11-26-h100-no-fsdp/NOTES.md, section 0t): update 0.60 / 0.62 vs 0.73 / 0.73 s and weight
  # sync 0.10-0.13 vs 0.24-0.29 s in two pairs (a third: update 0.83 vs 0.70 s, sync 0.13 vs 0.29 s), actor memory
  # 3.1 vs 3.8 GB. on: verl's FSDP2 (any number of GPUs). auto: off for a one-GPU LoRA actor under FSDP2, else on;
  # a setting the plain module cannot run (offloading, fp16, ...) then keeps FSDP2 with the reason in the log.
  : "${ACTOR_FSDP:=auto}"
  require_choice ACTOR_FSDP "$ACTOR_FSDP" auto on off
  local actor_fsdp_mode="$ACTOR_FSDP"
  if [[ "$ACTOR_FSDP" == auto ]]; then
    ACTOR_FSDP=on
    if (( N_GPUS_PER_NODE * NNODES == 1 )) && [[ "$ENABLE_LORA" == 1 && "$FSDP_STRATEGY" == fsdp2 ]]; then
      ACTOR_FSDP=off
    fi
  elif [[ "$ACTOR_FSDP" == off ]]; then
    if (( N_GPUS_PER_NODE * NNODES != 1 )); then
      echo "ACTOR_FSDP=off is for one GPU; N_GPUS_PER_NODE=$N_GPUS_PER_NODE NNODES=$NNODES would train a copy of the" \
        "model per GPU. Use ACTOR_FSDP=on or auto." >&2
      exit 2
    fi
    if [[ "$ENABLE_LORA" != 1 || "$FSDP_STRATEGY" != fsdp2 ]]; then
      echo "ACTOR_FSDP=off replaces FSDP2's build of a LoRA actor; ENABLE_LORA=$ENABLE_LORA FSDP_STRATEGY=$FSDP_STRATEGY." \
        "Use ENABLE_LORA=1 FSDP_STRATEGY=fsdp2, or ACTOR_FSDP=on or auto." >&2
      exit 2
    fi
  fi
  : "${PROJECT_NAME:=verl-ext}" "${EXPERIMENT_NAME:=${TASK_NAME}-${RUN_PROFILE}}"
  : "${CHECKPOINT_DIR:=$REPO_ROOT/checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME}"
  : "${LOG_DIR:=$REPO_ROOT/logs}" "${LOGGERS:=[console,file,wandb]}"
  check_loggers
  # A system message first in every prompt of every env (data.env.system_prompt; docs/envs.md); empty: none
  : "${SYSTEM_PROMPT:=}"
  # verl's per-step dumps of prompts and responses (text; large on long runs): off unless set
  : "${ROLLOUT_DUMP_DIR:=}"
  # Seconds between verl's looks for finished rollouts: verl's v1 replay buffer sleeps a fixed 2 s, so every
  # rollout phase ended on a 2 s grid (H100: smoke generation 2.07 -> 0.80 s with 0.1; docs/runs/speed-lab-notes/1-rollout-grid.md). 0.02 against
  # 0.1 (H100, docs/runs/2026-11-26-h100-input-cast-poll/NOTES.md, section 0u): realistic generation 6.95 vs 8.04 / 8.46 s, smoke generation off the 0.1 s grid
  # (0.29-0.33 s, where 0.1 ended at 0.315 or 0.417 s). A look that takes longer than 15 % of the wait stretches it
  # (verl_ext/patches/replay_buffer.py). "off" (or empty): verl's built-in sampler, e.g. for DAPO group filtering.
  : "${ROLLOUT_POLL_INTERVAL=0.02}"
  [[ "$ROLLOUT_POLL_INTERVAL" == off ]] && ROLLOUT_POLL_INTERVAL=""
  # LoRA: 1 merges the adapter into the weights sent to the rollout engine each step (verl's model.lora.merge),
  # so vLLM/SGLang generate without LoRA kernels; 0 serves it as an adapter (--enable-lora). H100, 128 x 8 x 512:
  # generation 1.75x -> 1.07x the offline vLLM time, weight sync 0.4 -> 1.7 s a step
  # (docs/runs/2026-11-24-h100-speed-merge/NOTES.md, section 0a).
  : "${ROLLOUT_LORA_MERGE:=1}"
  require_choice ROLLOUT_LORA_MERGE "$ROLLOUT_LORA_MERGE" 0 1
  # FSDP1 + an adapter served unmerged hangs with a PEFT before 0.22: the pre-flight check refuses it by the PEFT
  # installed (verl_ext/launch/preflight.py, tests/test_fsdp1_lora_sync.py)
  if [[ "$ENABLE_LORA" == "1" ]]; then
    : "${LR:=6e-5}"
    local lora_rank="$LORA_RANK"
  else
    : "${LR:=1e-6}"
    local lora_rank=0
  fi
  # The merged sync's base-weight backup (ENABLE_LORA=1, ROLLOUT_LORA_MERGE=1): "pinned" reuses page-locked host
  # buffers (verl_ext/patches/lora_backup.py; H100, 0.5B: the backup and restore 0.84 -> 0.06 s a step), "verl" keeps
  # verl's fresh pageable copy every step (no host memory held between steps).
  : "${LORA_MERGE_BACKUP:=pinned}"
  require_choice LORA_MERGE_BACKUP "$LORA_MERGE_BACKUP" pinned verl
  # How the merged sync computes W + scale x BA: "in_place" is verl's (backup, merge into the trained weights, send,
  # restore); "out_of_place" sends base + PEFT's delta computed beside the module, which it only reads: the same bits,
  # no host round trip (verl_ext/patches/lora_merged_sync.py; FSDP1, CPU offload, DoRA and lora_bias stay on verl's path).
  # H100, 0.5B shape, rank 32 (docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q): the actor's side of one sync 0.143 -> 0.082 s
  # (bench/micro/lora_sync_bench.py); smoke weight sync 0.295 s against 0.355-0.372 s in the three runs around it.
  : "${LORA_MERGE_SYNC:=out_of_place}"
  require_choice LORA_MERGE_SYNC "$LORA_MERGE_SYNC" in_place out_of_place
  # vLLM stays resident between rollouts (verl's free_cache_engine=False): no sleep after generation, no wake
  # and KV-cache rebuild before the next. H100, 128 x 8 x 512, with the 64k budget below: step 42.8 -> 33.7 s
  # (generation 27.3 -> 20.9 s) in one session; the actor then trains beside vLLM's GPU_MEMORY_UTILIZATION
  # share. 1: vLLM sleeps while the actor trains (verl's default; for models whose update needs that memory).
  # SGLang keeps 1: resident SGLang was not measured.
  local free_cache_default=0
  [[ "$ROLLOUT_BACKEND" == sglang ]] && free_cache_default=1
  : "${ROLLOUT_FREE_CACHE:=$free_cache_default}"
  require_choice ROLLOUT_FREE_CACHE "$ROLLOUT_FREE_CACHE" 0 1
  # How vLLM's engine core starts its GPU worker process: fork (the worker starts with the engine core's imports;
  # verl_ext/patches/vllm_worker_fork.py; H100: "engine core starting -> GPU worker created" 18-21 -> 2-3 s,
  # docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m) or spawn (what vLLM does when its server runs in a Ray actor, as under verl). SGLang, or an
  # explicit VLLM_WORKER_MULTIPROC_METHOD=spawn, default to spawn.
  local worker_start_default=fork
  [[ "$ROLLOUT_BACKEND" != vllm || "${VLLM_WORKER_MULTIPROC_METHOD:-}" == spawn ]] && worker_start_default=spawn
  : "${ROLLOUT_WORKER_START:=$worker_start_default}"
  require_choice ROLLOUT_WORKER_START "$ROLLOUT_WORKER_START" spawn fork
  if [[ "$ROLLOUT_WORKER_START" == fork && "$ROLLOUT_BACKEND" != vllm ]]; then
    echo "ROLLOUT_WORKER_START=fork applies to vLLM's engine core only; ROLLOUT_BACKEND=$ROLLOUT_BACKEND starts" \
      "its own processes. Use ROLLOUT_WORKER_START=spawn." >&2
    exit 2
  fi
  if [[ "$ROLLOUT_WORKER_START" == fork && "${VLLM_WORKER_MULTIPROC_METHOD:-}" == spawn ]]; then
    echo "ROLLOUT_WORKER_START=fork with VLLM_WORKER_MULTIPROC_METHOD=spawn in the environment: vLLM's explicit" \
      "spawn wins. Unset one of them." >&2
    exit 2
  fi
  local layered=False dynamic=False bypass=False checkpointing=False use_kl=True free_cache=False rollout_log_probs=True
  local remove_padding fused external_lib
  log_prob_flags  # sets remove_padding, fused, external_lib
  # the resolved switches that decide which patches apply (verl_ext/patches/registry.py)
  local switches=(SIGNAL_CHECK="$SIGNAL_CHECK" GRPO_TIED_GROUPS="$GRPO_TIED_GROUPS" MOVE_CREDIT="$MOVE_CREDIT" ROLLOUT_WORKER_START="$ROLLOUT_WORKER_START"
    OLD_LOG_PROB_PASS="$OLD_LOG_PROB_PASS" LM_HEAD_POSITIONS="$LM_HEAD_POSITIONS"
    ACTOR_FSDP="$ACTOR_FSDP" ACTOR_COMPILE="$ACTOR_COMPILE" GC_FREEZE="$GC_FREEZE"
    ATTN_IMPLEMENTATION="$ATTN_IMPLEMENTATION" ENABLE_LORA="$ENABLE_LORA"
    ROLLOUT_LORA_MERGE="$ROLLOUT_LORA_MERGE" LORA_MERGE_BACKUP="$LORA_MERGE_BACKUP" LORA_MERGE_SYNC="$LORA_MERGE_SYNC"
    ROLLOUT_POLL_INTERVAL="$ROLLOUT_POLL_INTERVAL" TASK_RUNNER="${TASK_RUNNER:=driver}"
    TRANSFER_QUEUE_START="${TRANSFER_QUEUE_START:=overlap}" PATCHES="$PATCHES")
  local composed patch_modules sampler
  composed="$(patch_registry compose "${switches[@]}")"
  external_lib="$(sed -n 's/^external_lib=//p' <<<"$composed")"
  patch_modules="$(sed -n 's/^modules=//p' <<<"$composed")"
  sampler="$(sed -n 's/^sampler=//p' <<<"$composed")"
  if [[ "$DRY_RUN" == 1 ]]; then patch_registry list "${switches[@]}" VERL_EXT_RESOLVED=1 >&2; fi
  [[ "$external_lib" == *,* ]] && external_lib="[$external_lib]"
  # Tokens per micro batch (at least one whole sequence). Packed micro batches do not pay for padding, so a
  # bigger budget costs little more per micro batch (H100 micro-batch bench: 16k 0.46 s, 32k 0.53 s, 64k 0.96 s;
  # padded rows: 16k 0.45 s, 32k 0.80 s): packing gets 64k (0.5B LoRA with checkpointing: 8.7 GB), padded rows
  # verl's 16k.
  local seq_len=$(( MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH )) budget=16384
  [[ "$USE_REMOVE_PADDING" == "1" ]] && budget=65536
  : "${MAX_TOKEN_LEN_PER_GPU:=$(( seq_len > budget ? seq_len : budget ))}"
  [[ "$LAYERED_SUMMON" == "1" ]] && layered=True
  [[ "$USE_DYNAMIC_BSZ" == "1" ]] && dynamic=True
  [[ "$BYPASS_OLD_LOG_PROB" == "1" ]] && bypass=True
  [[ "$GRADIENT_CHECKPOINTING" == "1" ]] && checkpointing=True
  [[ "$kl_on" == "0" ]] && use_kl=False  # KL off: verl then skips the reference forward pass
  [[ "$ROLLOUT_FREE_CACHE" == "1" ]] && free_cache=True
  [[ "$ROLLOUT_LOG_PROBS" == "0" ]] && rollout_log_probs=False
  ARGS=(
    algorithm.adv_estimator=grpo
    data.custom_cls.path=pkg://verl_ext.dataset
    data.custom_cls.name=DynamicEnvDataset
    data.train_files=env://train
    data.val_files=env://val
    data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.max_prompt_length="$MAX_PROMPT_LENGTH"
    data.max_response_length="$MAX_RESPONSE_LENGTH"
    data.dataloader_num_workers="$DATALOADER_WORKERS"
    +data.env.val_tasks_per_case="$VAL_TASKS_PER_CASE"
    reward.custom_reward_function.path=pkg://verl_ext.reward
    reward.custom_reward_function.name=compute_score
    actor_rollout_ref.model.path="$MODEL_PATH"
    +actor_rollout_ref.model.override_config.attn_implementation="$ATTN_IMPLEMENTATION"
    actor_rollout_ref.model.lora_rank="$lora_rank"
    actor_rollout_ref.model.lora_alpha="$LORA_ALPHA"
    actor_rollout_ref.model.target_modules="$LORA_TARGET_MODULES"
    actor_rollout_ref.actor.strategy="$FSDP_STRATEGY"
    actor_rollout_ref.ref.strategy="$FSDP_STRATEGY"
    actor_rollout_ref.actor.optim.lr="$LR"
    actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE_PER_GPU"
    actor_rollout_ref.actor.use_kl_loss="$use_kl"
    actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF"
    actor_rollout_ref.model.enable_gradient_checkpointing="$checkpointing"
    actor_rollout_ref.model.use_remove_padding="$remove_padding"
    actor_rollout_ref.model.use_fused_kernels="$fused"
    actor_rollout_ref.model.fused_kernel_options.impl_backend="$FUSED_KERNELS_BACKEND"
    actor_rollout_ref.actor.fsdp_config.model_dtype="$ACTOR_MODEL_DTYPE"
    actor_rollout_ref.actor.use_dynamic_bsz="$dynamic"
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$dynamic"
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$dynamic"
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$MAX_TOKEN_LEN_PER_GPU"
    algorithm.rollout_correction.bypass_mode="$bypass"
    actor_rollout_ref.rollout.calculate_log_probs="$rollout_log_probs"
    actor_rollout_ref.rollout.name="$ROLLOUT_BACKEND"
    actor_rollout_ref.rollout.n="$ROLLOUT_N"
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
    actor_rollout_ref.rollout.free_cache_engine="$free_cache"
    actor_rollout_ref.rollout.tensor_model_parallel_size="$TENSOR_PARALLEL_SIZE"
    actor_rollout_ref.rollout.enforce_eager="$ENFORCE_EAGER"
    actor_rollout_ref.rollout.load_format=safetensors
    actor_rollout_ref.rollout.layered_summon="$layered"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE_PER_GPU"
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE_PER_GPU"
    trainer.logger="$LOGGERS"
    trainer.project_name="$PROJECT_NAME"
    trainer.experiment_name="$EXPERIMENT_NAME"
    trainer.default_local_dir="$CHECKPOINT_DIR"
    trainer.n_gpus_per_node="$N_GPUS_PER_NODE"
    trainer.nnodes="$NNODES"
    trainer.total_training_steps="$TOTAL_TRAINING_STEPS"
    trainer.save_freq="$SAVE_FREQ"
    trainer.test_freq="$TEST_FREQ"
    trainer.val_before_train="$VAL_BEFORE_TRAIN"
    trainer.resume_mode=auto
  )
  if [[ -n "$ROLLOUT_DUMP_DIR" ]]; then
    ARGS+=(trainer.rollout_data_dir="$ROLLOUT_DUMP_DIR")
  fi
  if [[ -n "$SYSTEM_PROMPT" ]]; then
    ARGS+=(+data.env.system_prompt="$(hydra_quote "$SYSTEM_PROMPT")")
  fi
  if [[ -n "$external_lib" ]]; then
    ARGS+=(actor_rollout_ref.model.external_lib="$external_lib")
  fi
  if [[ "$ENABLE_LORA" == "1" && "$ROLLOUT_LORA_MERGE" == "1" ]]; then
    ARGS+=(actor_rollout_ref.model.lora.merge=True)
  fi
  if [[ -n "$LORA_ADAPTER_PATH" ]]; then
    ARGS+=(actor_rollout_ref.model.lora_adapter_path="$LORA_ADAPTER_PATH")
  fi
  # Our verl patches: the job's runtime_env reaches every Ray worker, on every node (and the TaskRunner, in the
  # driver too: verl_ext/patches/task_runner.py); verl imports the modules it names in each process
  # (the registry's order: unsharded_actor before compiled_layers, whose wrap of verl's FSDP build goes outside it, so
  # it compiles the plain module too)
  local modules="${VERL_USE_EXTERNAL_MODULES:-}"
  modules="${modules:+$modules${patch_modules:+,}}$patch_modules"
  [[ "$SIGNAL_CHECK" == abort ]] && ARGS+=(+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_SIGNAL_CHECK=abort)
  # auto: the worker keeps FSDP2 (with the reason) where a Hydra override asks for what the plain module cannot do
  if [[ "$ACTOR_FSDP" == off && "$actor_fsdp_mode" == auto ]]; then
    ARGS+=(+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_ACTOR_FSDP=auto)
  fi
  [[ "$GC_FREEZE" == watch ]] && ARGS+=(+ray_kwargs.ray_init.runtime_env.env_vars.VERL_EXT_GC_FREEZE=watch)
  if [[ "$modules" != "${VERL_USE_EXTERNAL_MODULES:-}" ]]; then
    [[ "$modules" == *,* ]] && modules="'$modules'"
    ARGS+=(+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES="$modules")
  fi
  if [[ -n "$sampler" ]]; then
    ARGS+=(trainer.v1.sampler.custom_sampler.path="pkg://$sampler"
      trainer.v1.sampler.custom_sampler.name=poll_replay_buffer
      +trainer.v1.sampler.sampler_kwargs.poll_interval="$ROLLOUT_POLL_INTERVAL")
  fi
  sample_log_steps
}

# Step numbers in the sample log (verl_ext/sample_steps.py): a sync GRPO step scores TRAIN_BATCH_SIZE x ROLLOUT_N
# samples, and a resumed run starts after the checkpoint's step. Hydra overrides of those keys count too.
sample_log_steps() {
  local bs="$TRAIN_BATCH_SIZE" n="$ROLLOUT_N" dir="$CHECKPOINT_DIR" resume=auto arg
  for arg in ${OVERRIDES[@]+"${OVERRIDES[@]}"}; do
    case "$arg" in
      data.train_batch_size=*) bs="${arg#*=}" ;;
      actor_rollout_ref.rollout.n=*) n="${arg#*=}" ;;
      trainer.default_local_dir=*) dir="${arg#*=}" ;;
      trainer.resume_mode=*) resume="${arg#*=}" ;;
    esac
  done
  if [[ -z "${VERL_EXT_SAMPLES_PER_STEP:-}" && "$bs" =~ ^[0-9]+$ && "$n" =~ ^[0-9]+$ ]]; then
    export VERL_EXT_SAMPLES_PER_STEP=$(( bs * n ))
  fi
  local latest="$dir/latest_checkpointed_iteration.txt"
  if [[ -z "${VERL_EXT_SAMPLE_STEP_OFFSET:-}" && "$resume" == auto && -f "$latest" ]]; then
    VERL_EXT_SAMPLE_STEP_OFFSET="$(tr -dc 0-9 < "$latest")"
    export VERL_EXT_SAMPLE_STEP_OFFSET="${VERL_EXT_SAMPLE_STEP_OFFSET:-0}"
  fi
}

# Stop with a message, not a traceback, when $PYTHON cannot import what the command needs: it names the
# interpreter (path, version), the missing modules and how to point PYTHON at the right environment.
#   require_python EXTRA MODULE[=SETTING] ...      (EXTRA: the pyproject extra to install, or "")
require_python() {
  local extra="$1" rc=0
  shift
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "pre-flight: PYTHON=$PYTHON: no such interpreter (not an executable file, not on PATH)." >&2
    echo "  Set PYTHON=/path/to/venv/bin/python, or activate the venv where verl-ext is installed." >&2
    exit 2
  fi
  "$PYTHON" "$REPO_ROOT/verl_ext/launch/interpreter.py" --python-var "$PYTHON" --command "$COMMAND_HINT" \
    --extra "$extra" --repo-root "$REPO_ROOT" "$@" || rc=$?
  if (( rc == 2 )); then exit 2; fi
  if (( rc != 0 )); then
    echo "pre-flight: PYTHON=$PYTHON ($(command -v "$PYTHON"), $("$PYTHON" --version 2>&1 | head -n 1)) could not" \
      "run the interpreter check (exit $rc); verl-ext needs Python 3.10-3.12." >&2
    echo "  Set PYTHON=/path/to/venv/bin/python, or activate the venv where verl-ext is installed." >&2
    exit 2
  fi
}

# SIGNAL_PRECHECK (docs/training.md "Will this run learn? (signal check)"): 1 runs `verl-ext signal` before a GRPO
# launch with the run's model (and LoRA adapter), data.env settings, response length, group size and rollout
# temperature/top_p, read from the main_ppo overrides, and prints its report (one model load; ROLLOUT_N x
# SIGNAL_PRECHECK_PROMPTS replies, or whole games with TASK_MODE=game|mixed); strict also stops the run (exit 3) when too few GRPO groups would have rewards
# that differ; only runs the check and stops there (the recipe's signal stage for whole games); 0 (default) skips it.
# The report lands next to the run's log (<run>.signal/signal.{json,md}) or in SIGNAL_PRECHECK_OUT.
signal_precheck_command() {  # SIGNAL_CMD=(the command) for: OUT_DIR OVERRIDE...
  local out="$1" arg key value model="" adapter="" n="" length="" prompt_length="" temperature="" top_p=""
  shift
  local sets=()
  for arg in "$@"; do
    [[ "$arg" == *=* ]] || continue
    key="${arg%%=*}" value="${arg#*=}"
    key="${key#+}" && key="${key#+}"  # Hydra's + and ++ prefixes
    case "$key" in
      data.env.*) sets+=(--env-override "$arg") ;;  # as given: Hydra's quoting (SYSTEM_PROMPT) stays intact
      actor_rollout_ref.model.path) model="$value" ;;
      actor_rollout_ref.model.lora_adapter_path) adapter="$value" ;;
      actor_rollout_ref.rollout.n) n="$value" ;;
      data.max_response_length) length="$value" ;;
      data.max_prompt_length) prompt_length="$value" ;;
      actor_rollout_ref.rollout.temperature) temperature="$value" ;;
      actor_rollout_ref.rollout.top_p) top_p="$value" ;;
    esac
  done
  SIGNAL_CMD=("$PYTHON" -m verl_ext.cli signal --model "$model" ${sets[@]+"${sets[@]}"}
    --prompts "${SIGNAL_PRECHECK_PROMPTS:-64}" --threshold "${SIGNAL_PRECHECK_THRESHOLD:-0.1}"
    --backend "${SIGNAL_PRECHECK_BACKEND:-auto}" --out "$out" --no-progress)
  [[ -n "$adapter" ]] && SIGNAL_CMD+=(--adapter "$adapter")
  [[ -n "$n" ]] && SIGNAL_CMD+=(--n "$n")
  [[ -n "$length" ]] && SIGNAL_CMD+=(--max-new-tokens "$length")
  [[ -n "$prompt_length" ]] && SIGNAL_CMD+=(--max-prompt-length "$prompt_length")
  [[ -n "$temperature" ]] && SIGNAL_CMD+=(--temperature "$temperature")
  [[ -n "$top_p" ]] && SIGNAL_CMD+=(--top-p "$top_p")
  [[ "$SIGNAL_PRECHECK" == strict ]] && SIGNAL_CMD+=(--strict)
  return 0
}

# Run the signal check (SIGNAL_PRECHECK=1|strict) into the run's log: RUN_PREFIX OVERRIDE...
run_signal_precheck() {
  local run="$1" rc
  shift
  signal_precheck_command "${SIGNAL_PRECHECK_OUT:-$run.signal}" "$@"
  echo "signal pre-check (SIGNAL_PRECHECK=$SIGNAL_PRECHECK): $(printf '%q ' "${SIGNAL_CMD[@]}")" | tee -a "$run.log"
  set +e
  "${SIGNAL_CMD[@]}" 2>&1 | tee -a "$run.log"
  rc="${PIPESTATUS[0]}"
  set -e
  if (( rc == 3 )); then
    echo "SIGNAL_PRECHECK=strict: the run is not started (the warning above names the cures; SIGNAL_PRECHECK=1" \
      "reports and starts anyway)." | tee -a "$run.log" >&2
    exit 3
  fi
  if (( rc != 0 )); then
    echo "signal pre-check failed (exit $rc, see above); the run is not started. Fix it or set SIGNAL_PRECHECK=0." >&2
    exit "$rc"
  fi
}

# Print (--dry-run) or check and run: pre-flight before Ray starts, output tee'd to LOG_DIR.
launch() {
  local config_name="$1" module="$2"
  shift 2
  local launcher=("${LAUNCHER[@]}")
  require_choice LOG_TIMESTAMPS "${LOG_TIMESTAMPS:=1}" 1 0
  # 1: the pre-flight runs inside verl's process (verl_ext.launch.ppo_main) instead of its own, so verl, torch
  # and vLLM are imported once (H100: pre-flight + config check done at 23 s instead of ~50-60 s; docs/runs/2026-11-24-h100-speed-merge/NOTES.md, section 0a).
  require_choice PREFLIGHT_IN_PROCESS "${PREFLIGHT_IN_PROCESS:=1}" 1 0
  # Start-up defaults, chosen together by measurement (docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m; H100, smoke load, three pairs on two
  # machines: 108.1 / 118.4 / 120.5 s to step 1 against 179.5 / 164.4 / 198.3 s in verl's order), with
  # ROLLOUT_WORKER_START=fork (grpo_args) and vLLM's compile cache below.
  # driver: verl's TaskRunner runs in this process, which has already imported verl, so one process start and its
  # imports leave the start-up (verl_ext/patches/task_runner.py); actor: a Ray actor of its own (verl's way)
  require_choice TASK_RUNNER "${TASK_RUNNER:=driver}" actor driver
  # overlap: TransferQueue starts while the trainer starts its workers (verl_ext/patches/transfer_queue_start.py);
  # serial: before the trainer (verl's order)
  require_choice TRANSFER_QUEUE_START "${TRANSFER_QUEUE_START:=overlap}" serial overlap
  # vLLM's torch.compile cache (~/.cache/vllm): verl turns it off (constants_ppo.py:93, corrupted artifacts with
  # concurrent engines, vLLM issue 31199) unless the environment sets it; torch >= 2.10 writes the artifacts
  # atomically. A later run on the machine reads its graphs back: torch.compile 3.3-4.3 s instead of 7.0-16.4 s.
  export VLLM_DISABLE_COMPILE_CACHE="${VLLM_DISABLE_COMPILE_CACHE:-0}"
  # warm: vLLM's inspection of the model's architecture (which its server otherwise runs in a fresh interpreter on
  # a machine's first run: 19.7 s of start-up on the H100, docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q) starts in the background at launch and
  # fills vLLM's model-info cache (verl_ext/launch/vllm_model_info.py); off: vLLM's server inspects when it starts
  require_choice ROLLOUT_MODEL_INFO "${ROLLOUT_MODEL_INFO:=warm}" warm off
  require_choice SIGNAL_PRECHECK "${SIGNAL_PRECHECK:=0}" 0 1 strict only
  local precheck=0
  [[ "$config_name" == ppo_trainer && "$SIGNAL_PRECHECK" != 0 ]] && precheck=1
  local warm_model_info=0
  [[ "$ROLLOUT_MODEL_INFO" == warm && "${ROLLOUT_BACKEND:-vllm}" == vllm ]] && warm_model_info=1
  local in_process=0 options=()
  if [[ "$config_name" == ppo_trainer && "$module" == verl.trainer.main_ppo
        && ( "$PREFLIGHT_IN_PROCESS" == 1 || "$TASK_RUNNER" == driver || "$TRANSFER_QUEUE_START" == overlap
             || "$warm_model_info" == 1 ) ]]; then
    module=verl_ext.launch.ppo_main
    if [[ "$PREFLIGHT_IN_PROCESS" == 1 ]]; then in_process=1; else options+=(--no-preflight); fi
    if [[ "$TASK_RUNNER" == driver ]]; then options+=(--task-runner driver); fi
    if [[ "$TRANSFER_QUEUE_START" == overlap ]]; then options+=(--transfer-queue-start overlap); fi
    if [[ "$warm_model_info" == 1 ]]; then options+=(--vllm-model-info warm); fi
  fi
  if (( ${#launcher[@]} == 0 )); then launcher=("$PYTHON"); fi
  local cmd=("${launcher[@]}" -m "$module" ${options[@]+"${options[@]}"} "$@")
  if [[ "$DRY_RUN" == "1" ]]; then
    if (( precheck )); then
      signal_precheck_command "${SIGNAL_PRECHECK_OUT:-$LOG_DIR/${EXPERIMENT_NAME:-run}-$(date +%Y%m%d-%H%M%S).signal}" "$@"
      printf '%q ' "${SIGNAL_CMD[@]}"
      printf '\n'
      [[ "$SIGNAL_PRECHECK" == only ]] && return 0
    fi
    printf '%q ' "${cmd[@]}"
    printf '\n'
    return 0
  fi
  if (( precheck )) && [[ "$SIGNAL_PRECHECK" == only ]]; then  # the check alone: no Ray, no rollout engine
    mkdir -p "$LOG_DIR"
    run_signal_precheck "$LOG_DIR/${EXPERIMENT_NAME:-run}-$(date +%Y%m%d-%H%M%S)" "$@"
    return 0
  fi
  if [[ "$config_name" == ppo_trainer ]]; then
    local backend="${ROLLOUT_BACKEND:-vllm}"
    require_python "$backend" verl verl_ext "$backend=ROLLOUT_BACKEND=$backend"
  else
    require_python vllm verl verl_ext torch
  fi
  if (( ! in_process )); then "$PYTHON" -m verl_ext.launch.preflight --config-name "$config_name" -- "$@"; fi
  mkdir -p "$LOG_DIR"
  local stamp run
  stamp="$(date +%Y%m%d-%H%M%S)"
  run="$LOG_DIR/${EXPERIMENT_NAME:-run}-$stamp"
  # one run, three files: console log, verl's per-step metrics (file logger), our per-sample reward log
  export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$run.metrics.jsonl}"
  export VERL_EXT_SAMPLE_LOG="${VERL_EXT_SAMPLE_LOG-$run.samples.jsonl}"
  echo "logging to $run.log (metrics: $VERL_FILE_LOGGER_PATH, samples: ${VERL_EXT_SAMPLE_LOG:-off})"
  # the sample log is written by verl's reward workers: Ray workers inherit this shell's environment only when
  # ray.init starts the cluster itself, so a run that joins one (RAY_ADDRESS: Slurm multi-node, several runs on
  # one GPU) names the file and its settings in the job's runtime_env (measured: the file,
  # docs/runs/2026-11-26-h100-smollm2-split/; the steps, whose count was left out until 2026-11-27: training
  # samples fell back to bursts between validations, 5 blocks for 100 steps, docs/runs/2026-11-27-h200x2-*)
  if [[ "$config_name" == ppo_trainer && -n "${RAY_ADDRESS:-}" ]]; then
    local var
    for var in VERL_EXT_SAMPLE_LOG VERL_EXT_SAMPLE_TEXTS VERL_EXT_SAMPLE_TEXT_CHARS VERL_EXT_SAMPLES_PER_STEP \
               VERL_EXT_SAMPLE_STEP_OFFSET; do
      if [[ -n "${!var:-}" ]]; then cmd+=("+ray_kwargs.ray_init.runtime_env.env_vars.$var=$(hydra_quote "${!var}")"); fi
    done
  fi
  if (( precheck )); then run_signal_precheck "$run" "$@"; fi
  # LOG_TIMESTAMPS=1: the log file gets a wall-clock stamp per line (verl prints step lines without one)
  if [[ "$LOG_TIMESTAMPS" == "1" ]]; then
    "${cmd[@]}" 2>&1 | "$PYTHON" -u "$REPO_ROOT/verl_ext/launch/logtee.py" --started "$SCRIPT_STARTED" "$run.log"
  else
    "${cmd[@]}" 2>&1 | tee -a "$run.log"  # -a: after the signal pre-check's report
  fi
}
