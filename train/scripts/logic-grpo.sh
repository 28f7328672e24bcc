#!/usr/bin/env bash
# GRPO on reasoning-gym logic puzzles with verl main_ppo, our DynamicEnvDataset and compute_score.
#   bash train/scripts/logic-grpo.sh [--dry-run] [hydra.key=value ...]
# Knobs (environment): LOGIC_CASES (reasoning-gym dataset names, comma-separated, or a mapping name -> dataset
# options such as '{chain_sum: {max_terms: 2}, leg_counting: {max_animals: 2}}'), MODEL_PATH, RUN_PROFILE and the
# rest of openspiel-ppo.sh's knobs.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
split_flags "$@"
load_dotenv

TASK_NAME=logic-grpo
: "${LOGIC_CASES:=knights_knaves,mini_sudoku,zebra_puzzles,syllogism}"
if [[ "${RUN_PROFILE:-full}" == "smoke" ]]; then : "${MAX_RESPONSE_LENGTH:=256}"; fi  # puzzles need room
apply_profile
grpo_args
if [[ "$LOGIC_CASES" == "{"* ]]; then logic_cases="$LOGIC_CASES"; else logic_cases="[$LOGIC_CASES]"; fi
ARGS+=(
  +data.env.logic.cases="$logic_cases"
  +data.env.logic.num_tasks_per_case="$NUM_TASKS_PER_CASE"
)
launch ppo_trainer verl.trainer.main_ppo "${ARGS[@]}" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
