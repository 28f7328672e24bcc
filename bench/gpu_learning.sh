#!/usr/bin/env bash
# The learning evidence run on the lent GPU (no network): install the carried wheel chunks, then run stages of
# train/recipes/from-scratch.sh in RUN_DIR; pack logs, metrics, eval results and plots into one archive under
# $OUT, and the SFT model in parts small enough for the harness to return (to start later runs from it).
#   bash bench/gpu_learning.sh install | pack | model-out | <recipe stages...>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${OUT:=outputs/gpu_learning}" "${CHUNKS:=/tmp/chunks}" "${SITE:=/tmp/site}"
export RUN_DIR="${RUN_DIR:-/tmp/learning}"
export PYTHONPATH="$SITE:$PWD" VLLM_USE_FLASHINFER_SAMPLER=0 RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

step_install() {
  python3 -m verl_ext.wheelhouse install --chunks "$CHUNKS" --target-dir "$SITE" 2>&1 | tail -3
}

# Everything small that the run wrote (no weights, checkpoints or parquet), plus the GPU's name.
step_pack() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$RUN_DIR/gpu.txt" 2>&1 || true
  find "$RUN_DIR" -maxdepth 3 -printf "%P %s\n" | sort > "$RUN_DIR/files.txt"
  tar czf "$OUT/learning.tgz" -C "$RUN_DIR" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.parquet' \
    --exclude='model' --exclude='sft' --exclude='grpo' --exclude='sft_hf' --exclude='grpo_hf' .
  ls -la "$OUT/learning.tgz"
}

# The merged SFT model (bf16) split into <= 15 MiB parts: `cat sft_hf.tar.part* | tar x` rebuilds it.
step_model_out() {
  tar cf - -C "$RUN_DIR" sft_hf | split -b 15M - "$OUT/sft_hf.tar.part"
  ls -la "$OUT"/sft_hf.tar.part*
}

case "${1:-}" in
  install) step_install ;;
  pack) step_pack ;;
  model-out) step_model_out ;;
  "") echo "usage: bench/gpu_learning.sh install | pack | model-out | <stages of train/recipes/from-scratch.sh>" >&2; exit 2 ;;
  *) bash train/recipes/from-scratch.sh "$@" ;;
esac
