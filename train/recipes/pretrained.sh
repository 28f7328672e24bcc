#!/usr/bin/env bash
# From a pretrained instruct model to a better player/solver: train/recipes/recipe.sh with MODEL=smollm2
# (SmolLM2-135M-Instruct, converted offline by `verl-ext model smollm2`) unless MODEL names another Hugging Face
# folder; COLD_START=rules (the rules, no strategy) by default, reference or none. Same stages, knobs and --dry-run.
#   bash train/recipes/pretrained.sh [--dry-run] [STAGE ...] [KEY=VALUE ...]
set -euo pipefail
MODEL="${MODEL:-smollm2}" exec bash "$(dirname "${BASH_SOURCE[0]}")/recipe.sh" "$@"
