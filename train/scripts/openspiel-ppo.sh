#!/usr/bin/env bash
# GRPO on OpenSpiel games with verl main_ppo, our DynamicEnvDataset and compute_score.
#   bash train/scripts/openspiel-ppo.sh [--dry-run] [hydra.key=value ...]
#   TASK_MODE=game bash train/scripts/openspiel-ppo.sh     # whole games in verl's agent loop (docs/games.md)
# Knobs (environment): MODEL_PATH, GAME_TYPES, REWARD_MODE, TASK_MODE=move|game|mixed,
# GAME_OPPONENT (random, mcts:N, self, or a mixture: random:0.3,mcts:25:0.4,self:0.3),
# MAX_REPLY_LENGTH, RUN_PROFILE=smoke|full, ENABLE_LORA, LORA_RANK,
# LORA_ALPHA, LORA_ADAPTER_PATH, FSDP_STRATEGY=fsdp2|fsdp, ROLLOUT_BACKEND=vllm|sglang, LAYERED_SUMMON,
# N_GPUS_PER_NODE, NNODES and the sizes in lib/common.sh. See README "Training".
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
split_flags "$@"
load_dotenv

TASK_NAME=openspiel-grpo
: "${TASK_MODE:=move}"
case "$TASK_MODE" in
  move) ;;
  game|mixed)
    # Whole games: one sample = one game, so the response budget holds every reply and every later prompt of
    # the trained seat. 512 + 3584 = 4096 tokens fits a full connect_four game with the single-move prompts
    # (measured ~2.9k response tokens with the project's tokenizer; docs/games.md) and tiny models' 4096 positions.
    # Card games get budgets of their own (the largest of the listed games'): a poker hand is a few turns, while a
    # small Hanabi game runs to 16 turns of ~330 tokens with SmolLM2's tokenizer (docs/games.md, "Poker and Hanabi").
    TASK_NAME=openspiel-game-grpo
    : "${GAME_TYPES:=tic_tac_toe,connect_four}"
    if [[ -z "${MAX_RESPONSE_LENGTH:-}" ]]; then
      MAX_RESPONSE_LENGTH=0
      IFS=, read -r -a game_types <<< "$GAME_TYPES"
      for game_type in "${game_types[@]}"; do
        case "${game_type// /}" in
          kuhn_poker) budget=1024 ;;
          leduc_poker|holdem_small) budget=2048 ;;
          hanabi_small) budget=6144 ;;
          *) budget=3584 ;;
        esac
        (( budget > MAX_RESPONSE_LENGTH )) && MAX_RESPONSE_LENGTH=$budget
      done
    fi
    : "${MAX_PROMPT_LENGTH:=512}"
    : "${GAME_OPPONENT:=random}" "${MAX_REPLY_LENGTH:=256}"
    # A KL anchor to the starting model by default in whole games: over 100 steps on SmolLM2-135M-Instruct without
    # it the actor entropy fell to 0.01 of step 1's and 6 % of the groups kept signal by the end (with it: 0.70 and
    # 71 %), and wins + draws against MCTS(50) fell to 43.0 % against 63.5 % (docs/training.md, "Learning signal and
    # collapse"; docs/runs/2026-11-29-h200x4-boardgames-seat-nokl-ent01-100/). It costs a reference pass a step.
    : "${KL_LOSS_COEF:=0.1}" ;;
  *)
    echo "TASK_MODE must be move, game or mixed, got '${TASK_MODE}'" >&2
    exit 2 ;;
esac
: "${GAME_TYPES:=tic_tac_toe,connect_four,hex,breakthrough,othello}"
: "${REWARD_MODE:=legal}"
apply_profile
grpo_args
ARGS+=(
  +data.env.openspiel.game_types="[$GAME_TYPES]"
  +data.env.openspiel.reward_mode="$REWARD_MODE"
  +data.env.openspiel.num_tasks_per_case="$NUM_TASKS_PER_CASE"
)
if [[ "$TASK_MODE" != "move" ]]; then
  ARGS+=(
    +data.env.openspiel.task_mode="$TASK_MODE"
    # quoted for Hydra: a mixture (random:0.3,mcts:25:0.4,self:0.3) has commas, which Hydra reads as a sweep
    +data.env.openspiel.game.opponent="$(hydra_quote "$GAME_OPPONENT")"
    +data.env.openspiel.game.max_tokens_per_turn="$MAX_REPLY_LENGTH"
    # verl loads agent loops from a file path (not pkg://); rows name the loop in their agent_name column
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$REPO_ROOT/verl_ext/games/agent_loops.yaml"
    actor_rollout_ref.rollout.multi_turn.enable=True
  )
fi
launch ppo_trainer verl.trainer.main_ppo "${ARGS[@]}" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
