#!/usr/bin/env bash
# Seconds per step of verl's SFT trainer (train/scripts/sft.sh) under several settings, run side by side on one
# GPU (contention included: compare the ratios, not the absolute numbers). Needs the RUN_DIR of
# train/recipes/from-scratch.sh with its model and export stages done. Found the per-token log-prob loop.
#   RUN_DIR=... bash bench/micro/sft_speed_probe.sh [STEPS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${RUN_DIR:?RUN_DIR of a from-scratch run}" "${OUT:=outputs/sft_probe}"
steps="${1:-20}"
declare -A VARIANTS=(
  [default]=""
  [unfused_log_probs]="model.use_fused_kernels=False"
  [no_compile]="engine.use_torch_compile=False"
  [fixed_batch]="data.use_dynamic_bsz=False data.micro_batch_size_per_gpu=64"
  [no_checkpointing]="model.enable_gradient_checkpointing=False"
  [loader_in_process]="data.num_workers=0"
)
mkdir -p "$OUT"
for name in "${!VARIANTS[@]}"; do
  # shellcheck disable=SC2086  # the variant's overrides are meant to split
  (MODEL_PATH="$RUN_DIR/model" SFT_TRAIN_FILE="$RUN_DIR/data/sft_train.parquet" SFT_VAL_FILE="$RUN_DIR/data/sft_val.parquet" \
    ENABLE_LORA=0 LR=1e-3 SFT_TOTAL_STEPS="$steps" EXPERIMENT_NAME="probe-$name" CHECKPOINT_DIR="/tmp/sft_probe/$name" \
    LOG_DIR="$OUT" LOGGERS="[console,file]" SFT_MAX_LENGTH=512 bash train/scripts/sft.sh ${VARIANTS[$name]} \
    > "$OUT/$name.out" 2>&1 || echo "$name: exit $?") &
done
wait
for name in "${!VARIANTS[@]}"; do
  rate=$(grep -o '[0-9.]*s/it\|[0-9.]*it/s' "$OUT/$name.out" | tail -1 || true)
  echo "$name: ${rate:-no rate} ($(grep -c Traceback "$OUT/$name.out" || true) tracebacks)"
done
