#!/usr/bin/env bash
# Merge a verl FSDP checkpoint into a Hugging Face model / PEFT adapter (see docs/merge.md).
#   train/scripts/merge-ppo.sh checkpoints/<project>/<experiment> -o merged/<experiment> [--verify] [--merge-lora]
# Runs `$PYTHON -m verl_ext.merge` (PYTHON: default python3, the same interpreter as the train scripts) after
# checking that this interpreter has verl-ext, torch and transformers; `.env` is loaded (HF_TOKEN for --push-to-hub).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib/common.sh disable=SC1091  # followed with --external-sources (tests/test_docker_static.py)
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
load_dotenv
require_python "" verl_ext torch transformers
exec "$PYTHON" -m verl_ext.merge "$@"
