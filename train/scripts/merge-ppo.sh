#!/usr/bin/env bash
# Merge a verl FSDP checkpoint into a Hugging Face model / PEFT adapter (see docs/merge.md).
#   train/scripts/merge-ppo.sh checkpoints/<project>/<experiment> -o merged/<experiment> [--verify] [--merge-lora]
# Thin wrapper: uses the `merge-ppo` console script when installed, else `$PYTHON -m verl_ext.merge`.
set -euo pipefail

if command -v merge-ppo >/dev/null 2>&1; then
    exec merge-ppo "$@"
fi
exec "${PYTHON:-python3}" -m verl_ext.merge "$@"
