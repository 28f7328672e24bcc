# shellcheck shell=bash
# Sourced by the lent-GPU evidence scripts (bench/gpu_smoke.sh, bench/gpu_learning.sh): where the carried wheel
# chunks and their install live on that machine, the environment the stack runs with, and the install step.
: "${CHUNKS:=/tmp/chunks}" "${SITE:=/tmp/site}"
export PYTHONPATH="$SITE:$PWD" VLLM_USE_FLASHINFER_SAMPLER=0 RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# System libraries carried next to the wheels when the image lacks them (docs/wheelhouse.md: libnuma.so.1 for
# sgl_kernel): the loader looks there first.
if [[ -d "$SITE/sysdeps" ]]; then export LD_LIBRARY_PATH="$SITE/sysdeps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi

# Install the chunks in $CHUNKS into $SITE (verified, offline; a second run is a no-op).
install_wheels() {
  python3 -m verl_ext.wheelhouse install --chunks "$CHUNKS" --target-dir "$SITE" 2>&1 | tail -5
}
