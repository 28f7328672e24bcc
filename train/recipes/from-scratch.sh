#!/usr/bin/env bash
# From a blank model to one that plays, on one GPU, stage by stage:
#   blank model -> export -> SFT -> HF model -> GRPO -> merge -> eval -> plots
#
#   bash train/recipes/from-scratch.sh [--dry-run] [STAGE ...] [KEY=VALUE ...]       # default: all
#   stages: model export sft hf grpo merge eval plot  (all = in this order), status
#   KEY=VALUE: Hydra overrides for the grpo stage, e.g. actor_rollout_ref.actor.entropy_coeff=0.01
#
# Every stage reads what the previous ones wrote under $RUN_DIR, records its wall time in timings.jsonl and a
# <stage>.done marker when it finishes; a done stage is skipped (FORCE=1 redoes it). A stage cut off mid-way
# (a time limit, a lost node) is simply run again: SFT and GRPO resume from their last checkpoint.
# --dry-run prints what each stage would run (the verl commands via the train scripts' own --dry-run).
# Knobs (environment, defaults below; docs/learning.md): RUN_DIR GAME_TYPES MODEL_SHAPE SFT_TASKS_PER_CASE
# SFT_ANSWERS SFT_GAME_SHARE VAL_TASKS_PER_CASE EXPORT_JOBS SFT_EPOCHS SFT_LR SFT_BATCH_SIZE GRPO_STEPS GRPO_LORA GRPO_LR GRPO_REWARD_MODE
# GRPO_SAVE_FREQ GRPO_KEEP_CHECKPOINTS GRPO_TEST_FREQ EVAL_GAMES EVAL_OPPONENTS EVAL_BACKEND EVAL_GENERATION_LENGTH; any train-script knob
# (TRAIN_BATCH_SIZE, ROLLOUT_N, GPU_MEMORY_UTILIZATION, ...) passes through to the GRPO stage.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
split_flags "$@"
load_dotenv
SCRIPTS="$REPO_ROOT/train/scripts"

: "${RUN_DIR:=$REPO_ROOT/outputs/from-scratch}" "${GAME_TYPES:=tic_tac_toe,connect_four}" "${MODEL_SHAPE:=small}"
: "${RECIPE_SEED:=0}" "${FORCE:=0}"
# data: MCTS reference moves for SFT (train positions), the held-out positions for SFT validation and eval;
# SFT_GAME_SHARE of the SFT rows are whole engine-played games (multi-turn rows: the warm start for
# TASK_MODE=game training, docs/games.md), 0 for single moves only
: "${SFT_TASKS_PER_CASE:=10000}" "${VAL_TASKS_PER_CASE:=200}" "${EXPORT_JOBS:=$(nproc 2>/dev/null || echo 1)}"
: "${SFT_ANSWERS:=reference}"  # reference: the engine's move; random: a random legal move (rules, no strategy)
require_choice SFT_ANSWERS "$SFT_ANSWERS" reference random
# whole games are engine demonstrations: none with random answers
if [[ "$SFT_ANSWERS" == "random" ]]; then : "${SFT_GAME_SHARE:=0}"; else : "${SFT_GAME_SHARE:=0.1}"; fi
# SFT: full fine-tune of the blank model; fp32 master weights (verl's default), cosine decay after a warm-up.
# verl's SFT rows are not padded to the max length, so room for whole games costs nothing on single moves.
: "${SFT_EPOCHS:=5}" "${SFT_LR:=1e-3}" "${SFT_BATCH_SIZE:=128}" "${SFT_WARMUP_RATIO:=0.05}" "${SFT_MAX_LENGTH:=4096}"
# GRPO from the SFT model: engine reward (MCTS value of the move vs the best move) keeps a signal once moves
# are legal; full fine-tune by default (GRPO_LORA=1: LoRA rank LORA_RANK)
# a checkpoint every step, the last 2 kept: a call's time limit cuts a run anywhere and resume loses at most the
# step in flight (a save of the 13M model took 0.2 s on the H100; the first runs saved every 5 and lost up to 4)
: "${GRPO_STEPS:=80}" "${GRPO_LORA:=0}" "${GRPO_REWARD_MODE:=engine}" "${GRPO_SAVE_FREQ:=1}" "${GRPO_TEST_FREQ:=10}"
: "${GRPO_KEEP_CHECKPOINTS:=2}"
# full fine-tune lr 3e-5: at 1e-4 both GPU runs and the CPU rehearsal with verl's own loss collapsed to a nearly
# deterministic policy within 10-20 steps; at 3e-5 the rehearsal kept exploring for 20 steps (collapsing by 40)
# and learned more on the way (docs/runs/2026-11-23-cpu-grpo-rehearsal/). On the H100 at 128 prompts a step
# (run 4, docs/runs/2026-11-23-h100-run4/) 3e-5 learned as much as 1e-4 (+0.058 held-out engine score) and
# collapsed more slowly but all the same (move entropy 0.11 nats by step 40). LoRA (rank 32) at 2e-4 moved like
# full fine-tuning at 3e-5 in the CPU rehearsal; on the H100 with KL 0.1 (run 5, docs/runs/2026-11-23-h100-run5/)
# it gave +0.044 in 15 steps and kept more of the move entropy.
if [[ "$GRPO_LORA" == "1" ]]; then : "${GRPO_LR:=2e-4}"; else : "${GRPO_LR:=3e-5}"; fi
# eval: blank vs SFT vs SFT+GRPO vs a random legal mover, held-out positions and full games
: "${EVAL_GAMES:=200}" "${EVAL_OPPONENTS:=random,mcts:50}" "${EVAL_BACKEND:=auto}" "${EVAL_GENERATION_LENGTH:=32}"

BLANK="$RUN_DIR/model"
DATA="$RUN_DIR/data"
SFT_DIR="$RUN_DIR/sft"
SFT_HF="$RUN_DIR/sft_hf"
GRPO_DIR="$RUN_DIR/grpo"
GRPO_HF="$RUN_DIR/grpo_hf"
LOGS="$RUN_DIR/logs"
STAGES=(model export sft hf grpo merge eval plot)
ENV_SETS=(--set "openspiel.game_types=[$GAME_TYPES]" --set "openspiel.seed=$RECIPE_SEED")

# Run (or, with --dry-run, print) one command.
run() {
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

need() {  # a stage's input must exist, else say which stage makes it
  local path="$1" stage="$2"
  if [[ "$DRY_RUN" != "1" && ! -e "$path" ]]; then
    echo "from-scratch: $path is missing; run the '$stage' stage first" >&2
    exit 2
  fi
}

stage_model() {
  run "$PYTHON" -m verl_ext.tiny_model --shape "$MODEL_SHAPE" --out "$BLANK" --game-types "$GAME_TYPES" \
    --seed "$RECIPE_SEED"
}

stage_export() {
  local common=("${ENV_SETS[@]}" --set "openspiel.num_tasks_per_case=$SFT_TASKS_PER_CASE"
                --set "val_tasks_per_case=$VAL_TASKS_PER_CASE" --format sft --answers "$SFT_ANSWERS"
                --jobs "$EXPORT_JOBS" --no-progress)
  if [[ "$SFT_GAME_SHARE" != "0" ]]; then
    common+=(--set openspiel.task_mode=mixed --set "openspiel.game_share=$SFT_GAME_SHARE")
  fi
  run "$PYTHON" -m verl_ext.cli export "${common[@]}" --split train --out "$DATA/sft_train.parquet"
  run "$PYTHON" -m verl_ext.cli export "${common[@]}" --split val --out "$DATA/sft_val.parquet"
}

stage_sft() {
  need "$BLANK/config.json" model
  need "$DATA/sft_train.parquet" export
  local flag=()
  [[ "$DRY_RUN" == "1" ]] && flag=(--dry-run)
  MODEL_PATH="$BLANK" SFT_TRAIN_FILE="$DATA/sft_train.parquet" SFT_VAL_FILE="$DATA/sft_val.parquet" \
    ENABLE_LORA=0 LR="$SFT_LR" LR_SCHEDULER=cosine LR_WARMUP_RATIO="$SFT_WARMUP_RATIO" SFT_EPOCHS="$SFT_EPOCHS" \
    SFT_BATCH_SIZE="$SFT_BATCH_SIZE" SFT_MAX_LENGTH="$SFT_MAX_LENGTH" SFT_SAVE_FREQ=after_each_epoch \
    SFT_TEST_FREQ=after_each_epoch SFT_SEED="$RECIPE_SEED" EXPERIMENT_NAME=sft CHECKPOINT_DIR="$SFT_DIR" \
    LOG_DIR="$LOGS" LOGGERS="${LOGGERS:-[console,file]}" \
    bash "$SCRIPTS/sft.sh" ${flag[@]+"${flag[@]}"}
}

stage_hf() {
  need "$SFT_DIR/latest_checkpointed_iteration.txt" sft
  run "$PYTHON" -m verl_ext.merge.cli "$SFT_DIR" -o "$SFT_HF" --verify --force --no-progress
}

stage_grpo() {
  need "$SFT_HF/config.json" hf
  local flag=()
  [[ "$DRY_RUN" == "1" ]] && flag=(--dry-run)
  # single moves: short prompts and replies; whole games (TASK_MODE=game|mixed): the train script's budgets
  local prompt_len="${MAX_PROMPT_LENGTH:-}" response_len="${MAX_RESPONSE_LENGTH:-}"
  if [[ "${TASK_MODE:-move}" == "move" ]]; then : "${prompt_len:=256}" "${response_len:=32}"; fi
  MODEL_PATH="$SFT_HF" GAME_TYPES="$GAME_TYPES" REWARD_MODE="$GRPO_REWARD_MODE" ENABLE_LORA="$GRPO_LORA" \
    LR="$GRPO_LR" RUN_PROFILE="${RUN_PROFILE:-full}" TOTAL_TRAINING_STEPS="$GRPO_STEPS" \
    SAVE_FREQ="$GRPO_SAVE_FREQ" TEST_FREQ="$GRPO_TEST_FREQ" VAL_BEFORE_TRAIN="${VAL_BEFORE_TRAIN:-True}" \
    VAL_TASKS_PER_CASE="$VAL_TASKS_PER_CASE" MAX_PROMPT_LENGTH="$prompt_len" \
    MAX_RESPONSE_LENGTH="$response_len" GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.3}" \
    NUM_TASKS_PER_CASE="${NUM_TASKS_PER_CASE:-$SFT_TASKS_PER_CASE}" EXPERIMENT_NAME=grpo CHECKPOINT_DIR="$GRPO_DIR" \
    LOG_DIR="$LOGS" LOGGERS="${LOGGERS:-[console,file]}" \
    bash "$SCRIPTS/openspiel-ppo.sh" ${flag[@]+"${flag[@]}"} "+data.env.openspiel.seed=$RECIPE_SEED" \
    "trainer.max_actor_ckpt_to_keep=$GRPO_KEEP_CHECKPOINTS" \
    ${GRPO_OVERRIDES[@]+"${GRPO_OVERRIDES[@]}"}
}

stage_merge() {
  need "$GRPO_DIR/latest_checkpointed_iteration.txt" grpo
  local lora=()
  [[ "$GRPO_LORA" == "1" ]] && lora=(--merge-lora)
  run "$PYTHON" -m verl_ext.merge.cli "$GRPO_DIR" -o "$GRPO_HF" ${lora[@]+"${lora[@]}"} --verify --force --no-progress
}

stage_eval() {
  need "$GRPO_HF/config.json" merge
  run "$PYTHON" -m verl_ext.cli eval "${ENV_SETS[@]}" --set "val_tasks_per_case=$VAL_TASKS_PER_CASE" \
    --set "openspiel.reward_mode=$GRPO_REWARD_MODE" \
    --models blank="$BLANK" sft="$SFT_HF" grpo="$GRPO_HF" random=scripted:random \
    --games-per-case "$EVAL_GAMES" --opponents "$EVAL_OPPONENTS" --max-new-tokens "$EVAL_GENERATION_LENGTH" \
    --backend "$EVAL_BACKEND" --seed "$RECIPE_SEED" --no-progress --out "$RUN_DIR/eval"
  if [[ "$SFT_GAME_SHARE" != "0" ]]; then
    # the models were taught whole games too: their play with the whole game conversation each turn (as
    # TASK_MODE=game training shows it), one retry after an illegal reply
    run "$PYTHON" -m verl_ext.cli eval "${ENV_SETS[@]}" --models sft="$SFT_HF" grpo="$GRPO_HF" --suites arena \
      --game-context game --illegal-retries 1 --games-per-case "$EVAL_GAMES" --opponents random \
      --max-new-tokens "$EVAL_GENERATION_LENGTH" --backend "$EVAL_BACKEND" --seed "$RECIPE_SEED" --no-progress \
      --out "$RUN_DIR/eval_game"
  fi
}

stage_plot() {
  local sft_logs=() grpo_logs=()
  if [[ "$DRY_RUN" == "1" ]]; then
    sft_logs=("$LOGS/sft-*.metrics.jsonl"); grpo_logs=("$LOGS/grpo-*.metrics.jsonl")
  else
    mapfile -t sft_logs < <(compgen -G "$LOGS/sft-*.metrics.jsonl" | sort)
    mapfile -t grpo_logs < <(compgen -G "$LOGS/grpo-*.metrics.jsonl" | sort)
    if (( ${#sft_logs[@]} + ${#grpo_logs[@]} == 0 )); then
      echo "from-scratch: no metrics in $LOGS yet; run the 'sft' and 'grpo' stages first" >&2
      exit 2
    fi
  fi
  if (( ${#sft_logs[@]} )); then
    run "$PYTHON" -m verl_ext.cli plot "${sft_logs[@]}" --out "$RUN_DIR/plots" --name sft --title "SFT of the blank $MODEL_SHAPE model"
  fi
  if (( ${#grpo_logs[@]} )); then
    # GRPO scores TRAIN_BATCH_SIZE x ROLLOUT_N samples a step (RUN_PROFILE=full: 128 x 8); a run cut mid-step logs
    # more samples than its steps, so the count is given rather than inferred
    run "$PYTHON" -m verl_ext.cli plot "${grpo_logs[@]}" --out "$RUN_DIR/plots" --name grpo --smooth 5 \
      --samples-per-step $(( ${TRAIN_BATCH_SIZE:-128} * ${ROLLOUT_N:-8} )) \
      --title "GRPO from the SFT model (reward_mode=$GRPO_REWARD_MODE)"
  fi
}

stage_status() {
  local stage
  for stage in "${STAGES[@]}"; do
    if [[ -f "$RUN_DIR/$stage.done" ]]; then echo "$stage: done ($(cat "$RUN_DIR/$stage.done"))"; else echo "$stage: to do"; fi
  done
}

# One stage: skip if done, else run it and record its wall time.
do_stage() {
  local stage="$1" started ended status=0
  if [[ "$DRY_RUN" == "1" ]]; then
    echo "# stage $stage"
    "stage_$stage"
    return 0
  fi
  if [[ -f "$RUN_DIR/$stage.done" && "$FORCE" != "1" ]]; then
    echo "from-scratch: stage $stage already done ($(cat "$RUN_DIR/$stage.done")); FORCE=1 redoes it"
    return 0
  fi
  mkdir -p "$RUN_DIR" "$LOGS" "$DATA"
  echo "from-scratch: stage $stage"
  started=$(date +%s.%N)
  # a subshell with errexit: a stage stops at its first failing command (errexit is off inside `f || ...`)
  set +e
  ( set -e; "stage_$stage" )
  status=$?
  set -e
  ended=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
  printf '{"stage": "%s", "seconds": %s, "exit_code": %d, "ended": "%s"}\n' "$stage" "$seconds" "$status" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$RUN_DIR/timings.jsonl"
  if (( status != 0 )); then
    echo "from-scratch: stage $stage failed (exit $status) after ${seconds} s; fix and rerun it" >&2
    exit "$status"
  fi
  echo "${seconds} s" > "$RUN_DIR/$stage.done"
  echo "from-scratch: stage $stage done in ${seconds} s"
}

# KEY=VALUE arguments are Hydra overrides for the grpo stage's main_ppo; the others name stages
requested=()
GRPO_OVERRIDES=()
for arg in ${OVERRIDES[@]+"${OVERRIDES[@]}"}; do
  if [[ "$arg" == *=* ]]; then GRPO_OVERRIDES+=("$arg"); else requested+=("$arg"); fi
done
if (( ${#requested[@]} == 0 )) || [[ "${requested[*]}" == "all" ]]; then requested=("${STAGES[@]}"); fi
for stage in "${requested[@]}"; do
  case "$stage" in
    status) stage_status ;;
    model|export|sft|hf|grpo|merge|eval|plot) do_stage "$stage" ;;
    *) echo "from-scratch: unknown stage '$stage' (stages: ${STAGES[*]}, all, status)" >&2; exit 2 ;;
  esac
done
