#!/usr/bin/env bash
# Issue 15's training paths on lent GPUs (no network), in one detached job: each path is a GRPO run with a
# checkpoint (bench/device/gpu_smoke.sh train; SGLang also resumes from it), merged by merge-ppo --verify, summarised;
# then one table (bench/speed/paths_table.py) with step times, throughput and, for two GPUs, the scaling efficiency.
#   bash bench/speed/paths_session.sh install | run [--dry-run] | detach | wait SECONDS | stop | pack
# PATHS: the names to run, space-separated (default: fsdp1). The two-GPU set (nvidia-h200-x2):
# PATHS="one_gpu dp2 tp2" (one_gpu pins one of the two GPUs, so the three run the same load on one machine);
# dp2_full_ft is the full fine-tune on two ranks (its merge reads a 2-rank full-model checkpoint).
# SGLang: install its own chunks (docs/wheelhouse.md, target h100-py312-cu130-sglang) into $SGLANG_SITE (default
# $SITE); the sglang path runs with that install, the others with $SITE, so one job can run both.
# Results: $PATHS_DIR/<name>/ (gpu_smoke's logs, metrics, summary.json, merge.log), $PATHS_DIR/paths.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../device/lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
: "${OUT:=outputs/paths_session}" "${PATHS_DIR:=/tmp/paths}" "${MODEL_DIR:=/tmp/qwen2.5-0.5b-random}"
: "${PATHS:=fsdp1}" "${SGLANG_SITE:=$SITE}"
# The load of the GPU-count comparison: big enough that a step is not dominated by fixed costs
SCALING_LOAD="TRAIN_BATCH_SIZE=128 PPO_MINI_BATCH_SIZE=32 ROLLOUT_N=8 MAX_RESPONSE_LENGTH=256"

# name -> `environment | gpu_smoke.sh steps` (train writes a checkpoint at step 5; resume runs steps 6-7 from it)
declare -A PATH_TABLE=(
  [fsdp1]="FSDP_STRATEGY=fsdp | train merge summary"
  [full_ft]="ENABLE_LORA=0 | train merge summary"
  [sglang]="ROLLOUT_BACKEND=sglang SITE=$SGLANG_SITE | train resume merge summary"
  [one_gpu]="N_GPUS_PER_NODE=1 CUDA_VISIBLE_DEVICES=0 $SCALING_LOAD | train merge summary"
  [dp2]="N_GPUS_PER_NODE=2 $SCALING_LOAD | train merge summary"
  [tp2]="N_GPUS_PER_NODE=2 TENSOR_PARALLEL_SIZE=2 $SCALING_LOAD | train merge summary"
  [dp2_full_ft]="N_GPUS_PER_NODE=2 ENABLE_LORA=0 $SCALING_LOAD | train merge summary"
)

# The commands of one path, one per gpu_smoke.sh step, each with the path's folders and environment.
commands_of() {
  local name="$1" spec environment steps step
  spec="${PATH_TABLE[$name]:-}"
  if [[ -z "$spec" ]]; then
    echo "PATHS: unknown path '$name'; known: ${!PATH_TABLE[*]}" >&2
    exit 2
  fi
  environment="${spec%%|*}" steps="${spec#*|}"
  local items=()
  read -r -a items <<< "$environment"
  for step in $steps; do
    local cmd=(env "OUT=$PATHS_DIR/$name" "WORK=$PATHS_DIR/$name/work" "MODEL_DIR=$MODEL_DIR" "${items[@]}"
               bash bench/device/gpu_smoke.sh "$step")
    printf '%q ' "${cmd[@]}"
    printf '\n'
  done
}

table_command() {
  printf '%q ' python3 bench/speed/paths_table.py "$PATHS_DIR" --paths "$PATHS" --out "$PATHS_DIR/paths.md"
}

step_run() {
  local name line
  local -a names
  read -r -a names <<< "$PATHS"
  for name in "${names[@]}"; do commands_of "$name" > /dev/null; done  # unknown names stop before anything runs
  if [[ "${1:-}" == --dry-run ]]; then
    for name in "${names[@]}"; do commands_of "$name"; done
    table_command
    printf '\n'
    return 0
  fi
  mkdir -p "$PATHS_DIR"
  for name in "${names[@]}"; do
    while IFS= read -r line; do
      session_step "$PATHS_DIR" "$name: ${line##*gpu_smoke.sh }" "$line"
    done < <(commands_of "$name")
  done
  session_step "$PATHS_DIR" "table" "$(table_command)"
}

session_main bench/speed/paths_session.sh "$PATHS_DIR" "$OUT/paths.tgz" "$@"
