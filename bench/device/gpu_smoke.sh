#!/usr/bin/env bash
# The GPU evidence run (lent H100, no network): install the carried wheel chunks, build a random-init
# Qwen2.5-0.5B-shaped model, run smoke GRPO (LoRA, FSDP2, vLLM) for 5 steps with a checkpoint, merge it,
# evaluate base vs trained, then resume for 2 more steps. Logs and per-step metrics go to $OUT.
#   bash bench/device/gpu_smoke.sh install|model|train|merge|eval|resume|summary|pack|all
# The switches pass through to openspiel-ppo.sh (ENABLE_LORA=0, FSDP_STRATEGY=fsdp, N_GPUS_PER_NODE=2,
# TENSOR_PARALLEL_SIZE=2, ...). ROLLOUT_BACKEND=sglang (the h100-py312-cu130-sglang chunks in $SITE) runs SGLang
# without FlashInfer kernels, as that target's [env] says: PyTorch sampling and triton attention.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
: "${OUT:=outputs/gpu_smoke}" "${MODEL_DIR:=/tmp/qwen2.5-0.5b-random}"
: "${WORK:=/tmp/verl-ext-smoke}" "${TRL_SITE:=/tmp/site-trl}"
mkdir -p "$OUT" "$WORK"
export RUN_PROFILE=smoke MODEL_PATH="$MODEL_DIR" GAME_TYPES="${GAME_TYPES:-tic_tac_toe,connect_four}"
export EXPERIMENT_NAME=gpu-smoke CHECKPOINT_DIR="$WORK/checkpoints" LOG_DIR="$OUT" LOGGERS='[console,file]'
BACKEND_ARGS=()
if [[ "${ROLLOUT_BACKEND:-vllm}" == sglang ]]; then
  export SGLANG_IS_FLASHINFER_AVAILABLE=false
  BACKEND_ARGS=(+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton)
fi

step_install() {
  install_wheels
  # the TRL peer of bench/speed/train_speed.sh goes to its own folder: with trl importable, verl 0.9.1 tries
  # trl's value-head classes that trl 1.x no longer has and the actor fails to start
  if compgen -G "$CHUNKS/extra/*.whl" > /dev/null; then
    python3 -m pip install --no-index --no-deps --target "$TRL_SITE" "$CHUNKS"/extra/*.whl 2>&1 | tail -1
  fi
}
step_model() {
  python3 -m verl_ext.tiny_model --shape qwen2.5-0.5b --out "$MODEL_DIR" --game-types "$GAME_TYPES"
}
step_train() {
  VERL_FILE_LOGGER_PATH="$OUT/metrics_train.jsonl" VERL_EXT_SAMPLE_LOG="$OUT/samples_train.jsonl" bash train/scripts/openspiel-ppo.sh \
    trainer.total_training_steps=5 trainer.save_freq=5 ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} "$@"
}
step_merge() {
  local lora=(--merge-lora)
  if [[ "${ENABLE_LORA:-1}" == 0 ]]; then lora=(); fi  # a full fine-tune has no adapter to merge
  python3 -m verl_ext.merge.cli "$CHECKPOINT_DIR" -o "$WORK/merged" ${lora[@]+"${lora[@]}"} --verify --force \
    --no-progress 2>&1 | tee "$OUT/merge.log"
  find "$WORK/merged" -maxdepth 2 -printf "%p %s\n" > "$OUT/merged_files.txt"
}
step_eval() {
  local trained="$MODEL_DIR,adapter=$WORK/merged/lora_adapter"
  if [[ "${ENABLE_LORA:-1}" == 0 ]]; then trained="$WORK/merged"; fi  # a full fine-tune merges to a whole model
  python3 -m verl_ext.cli eval --set "openspiel.game_types=[${GAME_TYPES}]" --set val_tasks_per_case=64 \
    --models base="$MODEL_DIR" trained="$trained" random=scripted:random \
    --games-per-case 20 --opponents random,mcts:50 --max-new-tokens 64 --backend "${EVAL_BACKEND:-auto}" \
    --no-progress --out "$OUT/eval" "$@" 2>&1 | tee "$OUT/eval.log"
}
step_resume() {
  VERL_FILE_LOGGER_PATH="$OUT/metrics_resume.jsonl" VERL_EXT_SAMPLE_LOG="$OUT/samples_resume.jsonl" bash train/scripts/openspiel-ppo.sh \
    trainer.total_training_steps=7 trainer.save_freq=7 ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} "$@"
}
step_summary() {
  local metrics=()
  for file in "$OUT"/metrics_train.jsonl "$OUT"/metrics_resume.jsonl; do
    if [[ -f "$file" ]]; then metrics+=("$file"); fi
  done
  python3 bench/speed/summarize_run.py "${metrics[@]}" --out "$OUT/summary.json"
  # start-up breakdown of the train call (the older of the train and resume console logs)
  local log="" candidate samples=()
  for candidate in "$OUT"/gpu-smoke-*.log; do
    if [[ -f "$candidate" && ( -z "$log" || "$log" -nt "$candidate" ) ]]; then log="$candidate"; fi
  done
  if [[ -f "$OUT/samples_train.jsonl" ]]; then samples=(--samples "$OUT/samples_train.jsonl"); fi
  if [[ -n "$log" ]]; then
    python3 bench/startup/startup_breakdown.py "$log" ${samples[@]+"${samples[@]}"} --out "$OUT/startup.json"
  fi
  find "$CHECKPOINT_DIR" -maxdepth 3 -printf "%p %s\n" > "$OUT/checkpoints.txt" 2>&1 || true
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1 || true
}

# The lent-GPU harness returns a limited number of files per call: pack everything small into one archive.
step_pack() {
  tar czf "$OUT.tgz" -C "$(dirname "$OUT")" --exclude='*.safetensors' --exclude='*.pt' "$(basename "$OUT")"
  echo "packed $OUT.tgz"
}

what="${1:-all}"
shift || true
case "$what" in
  install) step_install ;;
  model) step_model ;;
  train) step_train "$@" ;;
  merge) step_merge ;;
  eval) step_eval "$@" ;;
  resume) step_resume "$@" ;;
  summary) step_summary ;;
  pack) step_pack ;;
  all) step_install; step_model; step_train "$@"; step_merge; step_eval; step_resume "$@"; step_summary; step_pack ;;
  *) echo "usage: bench/device/gpu_smoke.sh install|model|train|merge|eval|resume|summary|pack|all" >&2; exit 2 ;;
esac
