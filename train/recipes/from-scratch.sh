#!/usr/bin/env bash
# From a blank model to one that plays: train/recipes/recipe.sh with MODEL=blank (a random-init tiny Qwen2 and a
# task tokenizer built by verl_ext.tiny_model), reference-answer SFT, then GRPO. Same stages, knobs and --dry-run.
#   bash train/recipes/from-scratch.sh [--dry-run] [STAGE ...] [KEY=VALUE ...]
set -euo pipefail
MODEL="${MODEL:-blank}" exec bash "$(dirname "${BASH_SOURCE[0]}")/recipe.sh" "$@"
