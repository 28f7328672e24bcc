#!/usr/bin/env bash
# End a run's GRPO stage at its last checkpoint, so that the recipe goes on with merge, eval and plot from that
# step: the run's grpo.done says where and why it was cut, then the stage's trainer (the process whose command line
# holds trainer.default_local_dir=RUN_DIR/grpo) is stopped; Ray ends its workers with it.
#   bash bench/learning/cut_grpo.sh RUN_DIR [REASON]
# Exit 0: cut, or nothing to cut (the stage is done); 1: no checkpoint yet (nothing is stopped: cutting now would
# leave merge nothing to start from). bench/learning/gpu_shared_cold_start.sh calls it at GRPO_CUT_AFTER_S; by
# hand it is the cut a late stage needs when a session's device time runs short.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# live_matches: the pids of live (not zombie) processes whose command line matches a pattern
# shellcheck source=../device/lent_gpu_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device/lent_gpu_env.sh"
(( $# >= 1 )) || { sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
run_dir="${1%/}"
reason="${2:-by hand}"
[[ -d "$run_dir" ]] || { echo "cut_grpo: no run folder $run_dir" >&2; exit 2; }
if [[ -f "$run_dir/grpo.done" ]]; then
  echo "cut_grpo: $run_dir: grpo is done ($(cat "$run_dir/grpo.done")); nothing to cut"
  exit 0
fi
tracker="$run_dir/grpo/latest_checkpointed_iteration.txt"
if [[ ! -s "$tracker" ]]; then
  echo "cut_grpo: $run_dir: no GRPO checkpoint yet ($tracker); not cut" >&2
  exit 1
fi
step="$(tr -d '[:space:]' < "$tracker")"
# verl 0.9.1 saves a step's checkpoint before it validates and logs that step (RayPPOTrainer.fit: _save_checkpoint,
# then _validate, then logger.log): a cut as soon as the checkpoint exists loses the step's held-out pass (on
# 2026-11-29 a run cut at step 60 kept no validation after step 40, though validating took ~7 s). So wait, at most
# CUT_LOG_WAIT_S seconds (default 120) and while the trainer lives, for the step's row in the run's newest metrics
# file; without such a file, cut at once.
pattern="default_local_dir=${run_dir}/grpo( |\$)"
metrics="$( (compgen -G "$run_dir/logs/grpo-*.metrics.jsonl" || true) | xargs -r ls -t | head -n 1)"
: "${CUT_LOG_WAIT_S:=120}"
if [[ -n "$metrics" ]]; then
  waited=0
  until grep -Eq "^\{\"step\": ?${step}[,}]" "$metrics" || [[ -z "$(live_matches "$pattern")" ]]; do
    if (( waited >= CUT_LOG_WAIT_S )); then
      echo "cut_grpo: $run_dir: step $step is not in $metrics after $waited s (CUT_LOG_WAIT_S); cutting without its" \
        "validation" >&2
      break
    fi
    sleep 2
    waited=$(( waited + 2 ))
  done
fi
# first the marker: the recipe's failed stage then counts as done, and the driver goes on with the run's stages
echo "cut at step $step ($reason), $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$run_dir/grpo.done"
mapfile -t pids < <(pgrep -f -- "$pattern" || true)
if (( ${#pids[@]} == 0 )); then
  echo "cut_grpo: $run_dir: marked done at step $step; no trainer process was running"
  exit 0
fi
kill -TERM "${pids[@]}" 2> /dev/null || true
for _ in $(seq 30); do
  [[ -n "$(live_matches "$pattern")" ]] || break
  sleep 1
done
IFS=, read -r -a left <<< "$(live_matches "$pattern")"
if (( ${#left[@]} )); then kill -KILL "${left[@]}" 2> /dev/null || true; fi
echo "cut_grpo: $run_dir: cut at step $step ($reason); stopped ${#pids[@]} trainer process(es)"
