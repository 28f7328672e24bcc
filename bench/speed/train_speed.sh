#!/usr/bin/env bash
# Training speed side by side on one GPU: our openspiel-ppo.sh (verl main_ppo, the script's default speed
# settings) and TRL's GRPOTrainer (vLLM colocate) on the same model, prompts, reward (verl_ext.reward),
# LoRA (r32/alpha32, all-linear), group size, batch and response length; one optimizer step per batch;
# and the ceiling for our generation phase: vLLM's offline LLM.generate on the same prompts and settings.
#   MODEL_PATH=/models/qwen bash bench/speed/train_speed.sh smoke|realistic [all|ours|trl|vllm|compare] [args]
# Loads: smoke = 16 prompts x 4 samples x 64 tokens, 5 steps; realistic = 128 x 8 x 512, 4 steps.
# args: hydra overrides for ours (and all); bench/speed/trl_grpo.py flags for trl (e.g. --no-gradient-checkpointing);
# bench/speed/vllm_offline.py flags for vllm (e.g. --max-num-seqs 256
# --out "$OUT/realistic/vllm_256.json": the last --out wins).
# Results: $OUT/<load>/{ours.json,startup.{json,md},gc_pauses.md,trl.json,vllm.json,compare.md} (OUT: outputs/train_speed).
# OURS_LABEL=name puts our run's files and its compare.md in $OUT/<load>/name/ (TRL's and the ceiling's stay in
# $OUT/<load>/): several settings of ours against one TRL run and one ceiling.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
load="${1:-smoke}"
what="${2:-all}"
shift 2 || shift $#
case "$load" in
  smoke) prompts=16 samples=4 tokens=64 steps="${STEPS:-5}" micro=64 tasks=64 ;;
  realistic) prompts=128 samples=8 tokens=512 steps="${STEPS:-4}" micro=32 tasks=256 ;;
  *) echo "usage: bench/speed/train_speed.sh smoke|realistic [all|ours|trl|vllm|compare]" >&2; exit 2 ;;
esac
: "${MODEL_PATH:?set MODEL_PATH to the model both trainers start from}"
: "${OUT:=outputs/train_speed}" "${GAME_TYPES:=tic_tac_toe,connect_four}" "${PYTHON:=python3}"
dir="$OUT/$load"
: "${OURS_LABEL:=}"
if [[ -n "$OURS_LABEL" && ! "$OURS_LABEL" =~ ^[A-Za-z0-9_-]+$ ]]; then
  echo "OURS_LABEL must be letters, digits, '_' or '-' (a folder name); got '$OURS_LABEL'" >&2
  exit 2
fi
ours_dir="$dir${OURS_LABEL:+/$OURS_LABEL}"
mkdir -p "$ours_dir"

run_ours() {
  RUN_PROFILE=smoke TRAIN_BATCH_SIZE="$prompts" PPO_MINI_BATCH_SIZE="$prompts" ROLLOUT_N="$samples" \
    MAX_RESPONSE_LENGTH="$tokens" TOTAL_TRAINING_STEPS="$steps" SAVE_FREQ=-1 NUM_TASKS_PER_CASE="$tasks" \
    GAME_TYPES="$GAME_TYPES" EXPERIMENT_NAME="speed-$load" LOG_DIR="$ours_dir" LOGGERS='[console,file]' \
    VERL_FILE_LOGGER_PATH="$ours_dir/verl_metrics.jsonl" VERL_EXT_SAMPLE_LOG="$ours_dir/verl_samples.jsonl" \
    CHECKPOINT_DIR="$ours_dir/checkpoints" \
    bash train/scripts/openspiel-ppo.sh "$@"
  "$PYTHON" bench/speed/summarize_run.py "$ours_dir/verl_metrics.jsonl" --samples-per-step $(( prompts * samples )) \
    --out "$ours_dir/ours.json"
  startup
}

# Start-up breakdown of the newest console log of this load (launch -> Ray -> FSDP -> vLLM -> step 1)
startup() {
  local log="" candidate
  for candidate in "$ours_dir/speed-$load"-*.log; do
    if [[ -f "$candidate" && ( -z "$log" || "$candidate" -nt "$log" ) ]]; then log="$candidate"; fi
  done
  if [[ -z "$log" ]]; then
    echo "no console log $ours_dir/speed-$load-*.log: start-up breakdown skipped" >&2
    return 0
  fi
  local sample_log=()
  if [[ -f "$ours_dir/verl_samples.jsonl" ]]; then sample_log=(--samples "$ours_dir/verl_samples.jsonl"); fi
  "$PYTHON" bench/startup/startup_breakdown.py "$log" ${sample_log[@]+"${sample_log[@]}"} --out "$ours_dir/startup.json"
  # which processes paused for Python's garbage collector, and how long (GC_FREEZE=1 / GC_FREEZE=watch lines)
  "$PYTHON" bench/profile/gc_pauses.py "$log" --out "$ours_dir/gc_pauses.md" > /dev/null
}

# The load's prompts as verl-ext export writes them (TRL and the vLLM ceiling read the same parquet)
export_prompts() {
  "$PYTHON" -m verl_ext.cli export --set "openspiel.game_types=[$GAME_TYPES]" \
    --set "openspiel.num_tasks_per_case=$tasks" --split train --no-progress --out "$dir/train.parquet"
}

run_trl() {
  export_prompts
  # TRL_PYTHONPATH: where trl is installed when it is kept apart from verl (verl 0.9.1 fails to start its
  # actor when trl 1.x is importable: it looks for trl's removed value-head classes)
  PYTHONPATH="${TRL_PYTHONPATH:+$TRL_PYTHONPATH:}${PYTHONPATH:-}" "$PYTHON" bench/speed/trl_grpo.py --model "$MODEL_PATH" --data "$dir/train.parquet" --prompts "$prompts" \
    --samples "$samples" --max-new-tokens "$tokens" --steps "$steps" --micro-batch "$micro" \
    --work-dir "$dir/trl_work" --out "$dir/trl.json" "$@" 2>&1 | tee "$dir/trl.log"
  # the next TRL run of a session overwrites trl.json (what `compare` reads): keep each run under its own name too
  local stamp
  stamp="$(date -u +%Y%m%dT%H%M%S)"
  if [[ -f "$dir/trl.json" ]]; then cp "$dir/trl.json" "$dir/trl.$stamp.json"; fi
  cp "$dir/trl.log" "$dir/trl.$stamp.log"
}

# vLLM offline on the same model, prompts, n, temperature, max tokens and GPU memory share as ours
run_vllm() {
  export_prompts
  local eager=()
  if [[ "${ENFORCE_EAGER:-False}" == "True" ]]; then eager=(--enforce-eager); fi
  "$PYTHON" bench/speed/vllm_offline.py --model "$MODEL_PATH" --data "$dir/train.parquet" --prompts "$prompts" \
    --samples "$samples" --max-tokens "$tokens" --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.4}" \
    ${eager[@]+"${eager[@]}"} --out "$dir/vllm.json" "$@" 2>&1 | tee "$dir/vllm.log"
}

compare() {
  local inputs=()  # what this load has measured besides our run's steps
  if [[ -f "$dir/trl.json" ]]; then inputs+=(--trl "$dir/trl.json"); fi
  if [[ -f "$dir/vllm.json" ]]; then inputs+=(--vllm "$dir/vllm.json"); fi
  if [[ -f "$ours_dir/startup.json" ]]; then inputs+=(--ours-startup "$ours_dir/startup.json"); fi
  "$PYTHON" bench/speed/compare_speed.py --ours "$ours_dir/ours.json" ${inputs[@]+"${inputs[@]}"} \
    --load "$prompts prompts x $samples samples x $tokens tokens${OURS_LABEL:+ ($OURS_LABEL)}" \
    --out "$ours_dir/compare.md"
}

case "$what" in
  ours) run_ours "$@" ;;
  trl) run_trl "$@" ;;
  vllm) run_vllm "$@" ;;
  compare) compare ;;
  all) run_ours "$@"; run_trl; run_vllm; compare ;;
  *) echo "usage: bench/speed/train_speed.sh smoke|realistic [all|ours|trl|vllm|compare]" >&2; exit 2 ;;
esac
