#!/usr/bin/env bash
# Training speed side by side on one GPU: our openspiel-ppo.sh (verl main_ppo, the script's default speed
# settings) and TRL's GRPOTrainer (vLLM colocate) on the same model, prompts, reward (verl_ext.reward),
# LoRA (r32/alpha32, all-linear), group size, batch and response length; one optimizer step per batch.
#   MODEL_PATH=/models/qwen bash bench/train_speed.sh smoke|realistic [all|ours|trl|compare] [hydra overrides]
# Loads: smoke = 16 prompts x 4 samples x 64 tokens, 5 steps; realistic = 128 x 8 x 512, 4 steps.
# Results: $OUT/<load>/{ours.json,trl.json,compare.md} (OUT defaults to outputs/train_speed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
load="${1:-smoke}"
what="${2:-all}"
shift 2 || shift $#
case "$load" in
  smoke) prompts=16 samples=4 tokens=64 steps="${STEPS:-5}" micro=64 tasks=64 ;;
  realistic) prompts=128 samples=8 tokens=512 steps="${STEPS:-4}" micro=32 tasks=256 ;;
  *) echo "usage: bench/train_speed.sh smoke|realistic [all|ours|trl|compare]" >&2; exit 2 ;;
esac
: "${MODEL_PATH:?set MODEL_PATH to the model both trainers start from}"
: "${OUT:=outputs/train_speed}" "${GAME_TYPES:=tic_tac_toe,connect_four}" "${PYTHON:=python3}"
dir="$OUT/$load"
mkdir -p "$dir"

run_ours() {
  RUN_PROFILE=smoke TRAIN_BATCH_SIZE="$prompts" PPO_MINI_BATCH_SIZE="$prompts" ROLLOUT_N="$samples" \
    MAX_RESPONSE_LENGTH="$tokens" TOTAL_TRAINING_STEPS="$steps" SAVE_FREQ=-1 NUM_TASKS_PER_CASE="$tasks" \
    GAME_TYPES="$GAME_TYPES" EXPERIMENT_NAME="speed-$load" LOG_DIR="$dir" LOGGERS='[console,file]' \
    VERL_FILE_LOGGER_PATH="$dir/verl_metrics.jsonl" VERL_EXT_SAMPLE_LOG="$dir/verl_samples.jsonl" \
    CHECKPOINT_DIR="$dir/checkpoints" \
    bash train/scripts/openspiel-ppo.sh "$@"
  "$PYTHON" bench/summarize_run.py "$dir/verl_metrics.jsonl" --samples-per-step $(( prompts * samples )) \
    --out "$dir/ours.json"
}

run_trl() {
  "$PYTHON" -m verl_ext.cli export --set "openspiel.game_types=[$GAME_TYPES]" \
    --set "openspiel.num_tasks_per_case=$tasks" --split train --no-progress --out "$dir/train.parquet"
  # TRL_PYTHONPATH: where trl is installed when it is kept apart from verl (verl 0.9.1 fails to start its
  # actor when trl 1.x is importable: it looks for trl's removed value-head classes)
  PYTHONPATH="${TRL_PYTHONPATH:+$TRL_PYTHONPATH:}${PYTHONPATH:-}" "$PYTHON" bench/trl_grpo.py --model "$MODEL_PATH" --data "$dir/train.parquet" --prompts "$prompts" \
    --samples "$samples" --max-new-tokens "$tokens" --steps "$steps" --micro-batch "$micro" \
    --work-dir "$dir/trl_work" --out "$dir/trl.json" 2>&1 | tee "$dir/trl.log"
}

compare() {
  "$PYTHON" bench/compare_speed.py --ours "$dir/ours.json" --trl "$dir/trl.json" \
    --load "$prompts prompts x $samples samples x $tokens tokens" --out "$dir/compare.md"
}

case "$what" in
  ours) run_ours "$@" ;;
  trl) run_trl ;;
  compare) compare ;;
  all) run_ours "$@"; run_trl; compare ;;
  *) echo "usage: bench/train_speed.sh smoke|realistic [all|ours|trl|compare]" >&2; exit 2 ;;
esac
