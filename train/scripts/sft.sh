#!/usr/bin/env bash
# Supervised fine-tuning with verl's SFT trainer (torchrun, one node) on parquet from `verl-ext export --format sft`.
#   verl-ext export --config data/games.yaml --format sft --out data/sft_train.parquet
#   verl-ext export --config data/games.yaml --format sft --split val --out data/sft_val.parquet
#   bash train/scripts/sft.sh [--dry-run] [hydra.key=value ...]
# Knobs (environment): MODEL_PATH, SFT_TRAIN_FILE, SFT_VAL_FILE, ENABLE_LORA, LR, LR_SCHEDULER, LR_WARMUP_RATIO,
# SFT_EPOCHS, SFT_TOTAL_STEPS, SFT_BATCH_SIZE, SFT_MAX_LENGTH, SFT_SAVE_FREQ, ... (docs/training.md "SFT").
# Rerunning the same command resumes from the last checkpoint (trainer.resume_mode=auto).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
split_flags "$@"
load_dotenv

: "${MODEL_PATH:=Qwen/Qwen2.5-0.5B-Instruct}"
: "${SFT_TRAIN_FILE:=$REPO_ROOT/data/sft_train.parquet}" "${SFT_VAL_FILE:=$REPO_ROOT/data/sft_val.parquet}"
: "${ENABLE_LORA:=1}" "${LORA_RANK:=32}" "${LORA_ALPHA:=32}" "${FSDP_STRATEGY:=fsdp2}"
: "${N_GPUS_PER_NODE:=1}" "${NNODES:=1}" "${SFT_EPOCHS:=2}" "${SFT_TOTAL_STEPS:=}" "${SFT_BATCH_SIZE:=64}"
: "${SFT_MAX_LENGTH:=1536}" "${MICRO_BATCH_SIZE_PER_GPU:=8}" "${PROJECT_NAME:=verl-ext}" "${EXPERIMENT_NAME:=sft}"
: "${CHECKPOINT_DIR:=$REPO_ROOT/checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME}" "${LOG_DIR:=$REPO_ROOT/logs}"
: "${ATTN_IMPLEMENTATION:=sdpa}" "${LOGGERS:=[console,file,wandb]}" "${SFT_SEED:=1}"
check_loggers  # drops (or, LOGGER_CHECK=strict, stops on) a logger $PYTHON cannot import
# constant: verl's default; cosine decays to 0 over the run (what from-scratch training wants)
: "${LR_SCHEDULER:=constant}" "${LR_WARMUP_RATIO:=0}"
# -1: save only at the end; after_each_epoch, or every N steps, lets a killed run resume close to where it stopped
: "${SFT_SAVE_FREQ:=-1}" "${SFT_TEST_FREQ:=-1}"
if [[ "$ENABLE_LORA" == "1" ]]; then : "${LR:=1e-4}"; lora_rank="$LORA_RANK"; else : "${LR:=1e-5}"; lora_rank=0; fi
# fused log-prob kernels and padded rows under SDPA, as in the GRPO scripts (lib/common.sh)
log_prob_flags
ARGS=(
  data.train_files="$SFT_TRAIN_FILE"
  data.val_files="$SFT_VAL_FILE"
  data.messages_key=messages
  data.train_batch_size="$SFT_BATCH_SIZE"
  data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE_PER_GPU"
  data.max_length="$SFT_MAX_LENGTH"
  model.path="$MODEL_PATH"
  model.lora_rank="$lora_rank"
  model.lora_alpha="$LORA_ALPHA"
  model.target_modules=all-linear
  +model.override_config.attn_implementation="$ATTN_IMPLEMENTATION"
  model.use_remove_padding="$remove_padding"
  model.use_fused_kernels="$fused"
  model.fused_kernel_options.impl_backend="$FUSED_KERNELS_BACKEND"
  engine.strategy="$FSDP_STRATEGY"
  optim.lr="$LR"
  optim.lr_scheduler_type="$LR_SCHEDULER"
  optim.lr_warmup_steps_ratio="$LR_WARMUP_RATIO"
  trainer.project_name="$PROJECT_NAME"
  trainer.experiment_name="$EXPERIMENT_NAME"
  trainer.default_local_dir="$CHECKPOINT_DIR"
  trainer.total_epochs="$SFT_EPOCHS"
  trainer.save_freq="$SFT_SAVE_FREQ"
  trainer.test_freq="$SFT_TEST_FREQ"
  trainer.seed="$SFT_SEED"
  trainer.n_gpus_per_node="$N_GPUS_PER_NODE"
  trainer.nnodes="$NNODES"
  "trainer.logger=$LOGGERS"
)
if [[ -n "$external_lib" ]]; then
  ARGS+=(model.external_lib="$external_lib")
fi
if [[ -n "$SFT_TOTAL_STEPS" ]]; then
  ARGS+=(trainer.total_training_steps="$SFT_TOTAL_STEPS")
fi
if [[ "$DRY_RUN" != "1" ]]; then
  for f in "$SFT_TRAIN_FILE" "$SFT_VAL_FILE"; do
    [[ -f "$f" ]] || { echo "SFT_TRAIN_FILE/SFT_VAL_FILE: no such file '$f' (make it with verl-ext export --format sft)" >&2; exit 2; }
  done
  # every row must fit SFT_MAX_LENGTH: verl's SFT stops at the first longer row when its batch comes up (mid-epoch);
  # the interpreter check first (as the launch's), so a Python without verl gets its message, not a traceback
  require_python vllm verl verl_ext torch
  "$PYTHON" -m verl_ext.sft_length "$SFT_TRAIN_FILE" "$SFT_VAL_FILE" --model "$MODEL_PATH" --max-length "$SFT_MAX_LENGTH"
fi
if [[ "$NNODES" != "1" ]]; then
  echo "NNODES: sft.sh runs torchrun --standalone on one node; got NNODES=$NNODES" >&2
  exit 2
fi
# torch.distributed.run of the same interpreter (a `torchrun` on PATH may belong to another environment)
LAUNCHER=("$PYTHON" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node="$N_GPUS_PER_NODE")
launch sft_trainer_engine verl.trainer.sft_trainer "${ARGS[@]}" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
