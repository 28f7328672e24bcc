#!/usr/bin/env bash
# The learning evidence run on the lent GPU (no network): install the carried wheel chunks, then run stages of
# train/recipes/from-scratch.sh in RUN_DIR; pack logs, metrics, eval results and plots into one archive under
# $OUT, and merged models in parts small enough for the harness to return (to start later runs from them).
#   bash bench/gpu_learning.sh install | pack | model-out [MODEL_DIR_NAME ...] | model-in DIR | <recipe stages...>
# model-in unpacks model parts carried from an earlier run (DIR/NAME.tar.part*) into RUN_DIR, so a session can
# start at `grpo` from a carried SFT model: `bash bench/gpu_learning.sh model-in outputs/carry && ... model grpo`.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lent_gpu_env.sh
source bench/lent_gpu_env.sh
: "${OUT:=outputs/gpu_learning}"
export RUN_DIR="${RUN_DIR:-/tmp/learning}"
mkdir -p "$OUT"

# Everything small that the run wrote (no weights, checkpoints or parquet), plus the GPU's name.
step_pack() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$RUN_DIR/gpu.txt" 2>&1 || true
  find "$RUN_DIR" -maxdepth 3 -printf "%P %s\n" | sort > "$RUN_DIR/files.txt"
  tar czf "$OUT/learning.tgz" -C "$RUN_DIR" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.parquet' \
    --exclude='model' --exclude='sft' --exclude='grpo' --exclude='sft_hf' --exclude='grpo_hf' .
  ls -la "$OUT/learning.tgz"
}

# Merged models of RUN_DIR (default sft_hf; bf16) split into <= 15 MiB parts: `cat NAME.tar.part* | tar x`.
step_model_out() {
  local name
  for name in "${@:-sft_hf}"; do
    tar cf - -C "$RUN_DIR" "$name" | split -b 15M - "$OUT/$name.tar.part"
    ls -la "$OUT/$name".tar.part*
  done
}

# Unpack every NAME.tar.part* set in DIR (written by model-out) into RUN_DIR.
step_model_in() {
  local dir="${1:?usage: bench/gpu_learning.sh model-in DIR}" first name found=0
  mkdir -p "$RUN_DIR"
  for first in "$dir"/*.tar.partaa; do
    [[ -e "$first" ]] || continue
    name="$(basename "$first" .tar.partaa)"
    cat "$dir/$name".tar.part* | tar xf - -C "$RUN_DIR"
    echo "model-in: $name -> $RUN_DIR/$name"
    found=1
  done
  if (( ! found )); then echo "model-in: no *.tar.partaa in '$dir'" >&2; exit 2; fi
}

case "${1:-}" in
  install) install_wheels ;;
  pack) step_pack ;;
  model-out) shift; step_model_out "$@" ;;
  model-in) shift; step_model_in "$@" ;;
  "") echo "usage: bench/gpu_learning.sh install | pack | model-out [NAME ...] | model-in DIR | <recipe stages>" >&2
      exit 2 ;;
  *) bash train/recipes/from-scratch.sh "$@" ;;
esac
