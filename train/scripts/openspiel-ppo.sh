#!/usr/bin/env bash
# GRPO on OpenSpiel games with verl main_ppo, our DynamicEnvDataset and compute_score.
#   bash train/scripts/openspiel-ppo.sh [--dry-run] [hydra.key=value ...]
# Knobs (environment): MODEL_PATH, GAME_TYPES, REWARD_MODE, RUN_PROFILE=smoke|full, ENABLE_LORA, LORA_RANK,
# LORA_ALPHA, LORA_ADAPTER_PATH, FSDP_STRATEGY=fsdp2|fsdp, ROLLOUT_BACKEND=vllm|sglang, LAYERED_SUMMON,
# N_GPUS_PER_NODE, NNODES and the sizes in lib/common.sh. See README "Training".
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
split_flags "$@"
load_dotenv

TASK_NAME=openspiel-grpo
: "${GAME_TYPES:=tic_tac_toe,connect_four,hex,breakthrough,othello}"
: "${REWARD_MODE:=legal}"
apply_profile
grpo_args
ARGS+=(
  +data.env.openspiel.game_types="[$GAME_TYPES]"
  +data.env.openspiel.reward_mode="$REWARD_MODE"
  +data.env.openspiel.num_tasks_per_case="$NUM_TASKS_PER_CASE"
)
launch ppo_trainer verl.trainer.main_ppo "${ARGS[@]}" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
