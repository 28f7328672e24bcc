#!/usr/bin/env bash
# The learning evidence run on the lent GPU (no network): install the carried wheel chunks, then run stages of
# train/recipes/recipe.sh (MODEL=blank by default, MODEL=smollm2 for the real model) in RUN_DIR; pack logs, metrics, eval results and plots into one archive under
# $OUT, and merged models in parts small enough for the harness to return (to start later runs from them).
#   bash bench/learning/gpu_learning.sh install | pack | model-out [MODEL_DIR_NAME ...] | model-in DIR | <recipe stages...>
#   bash bench/learning/gpu_learning.sh detach <recipe stages...> | queue <recipe stages...> | wait-detached SECONDS | stop
# model-in unpacks model parts carried from an earlier run (DIR/NAME.tar.part*) into RUN_DIR, so a session can
# start at `grpo` from a carried SFT model: `bash bench/learning/gpu_learning.sh model-in outputs/carry && ... model grpo`.
# detach starts the stages in their own process session, which the lent machine keeps running after the call
# returns (until it is given back): one GRPO run spans several calls with one start-up. wait-detached SECONDS
# waits for it (or SECONDS) and prints the last step's metrics; stop ends it. The job runs from a copy of the
# checkout in $RUN_DIR/code, which later calls that refresh the working tree cannot change under it.
# One detached job per host ($DETACH_LOCK): two verl runs with their own Ray clusters both get Ray job id
# 01000000, so verl 0.9.1's weight-sync socket /tmp/rl-colocate-zmq-<job id>-replica-0-rank-0.sock is the same
# path for both and their weight syncs hang or cross (measured: docs/runs/2026-11-23-h100-run4/). queue (with
# another RUN_DIR) detaches its stages as soon as the running job ends, so two runs share a session without a
# device call between them (docs/runs/2026-11-23-h100-run5/); wait-detached and stop also cover a queued job.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../device/lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
: "${OUT:=outputs/gpu_learning}"
export RUN_DIR="${RUN_DIR:-/tmp/learning}"
mkdir -p "$OUT"

# Everything small that the run wrote (no weights, checkpoints or parquet), plus the GPU's name.
step_pack() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$RUN_DIR/gpu.txt" 2>&1 || true
  find "$RUN_DIR" -maxdepth 3 -printf "%P %s\n" | sort > "$RUN_DIR/files.txt"
  tar czf "$OUT/learning.tgz" -C "$RUN_DIR" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.parquet' \
    --exclude='model' --exclude='code' --exclude='sft' --exclude='grpo' --exclude='sft_hf' --exclude='grpo_hf' .
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
  local dir="${1:?usage: bench/learning/gpu_learning.sh model-in DIR}" first name found=0
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

# Start `gpu_learning.sh ARGS` from a copy of the checkout in a new process session; log: $RUN_DIR/detached.log.
step_detach() {
  (( $# )) || { echo "usage: bench/learning/gpu_learning.sh detach <recipe stages...>" >&2; exit 2; }
  if alive "$RUN_DIR/detached.pid"; then
    echo "detach: a job is already running in $RUN_DIR (pid $(cat "$RUN_DIR/detached.pid")); stop it first" >&2
    exit 2
  fi
  session_detach "$RUN_DIR" bench/learning/gpu_learning.sh "$@"
}

# Detach ARGS once the host's running detached job (the lock's pid) ends, so that a second run follows the first
# without a device call in between; detaches at once when none is running. Log: $RUN_DIR/queue.log.
step_queue() {
  (( $# )) || { echo "usage: bench/learning/gpu_learning.sh queue <recipe stages...>" >&2; exit 2; }
  local other_pid other_dir
  host_job_running || { step_detach "$@"; return; }
  if [[ "$other_dir" == "$RUN_DIR" ]]; then
    echo "queue: the running job already uses RUN_DIR $RUN_DIR; queue into another RUN_DIR" >&2
    exit 2
  fi
  if alive "$RUN_DIR/queued.pid"; then
    echo "queue: a job is already queued in $RUN_DIR (pid $(cat "$RUN_DIR/queued.pid")); stop it first" >&2
    exit 2
  fi
  local snapshot="$RUN_DIR/queued-code"
  copy_checkout "$snapshot"
  # shellcheck disable=SC2016  # $1 and $@ belong to the waiter's own bash
  (cd "$snapshot" && exec setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 3; done; shift
    exec bash bench/learning/gpu_learning.sh detach "$@"' queue "$other_pid" "$@" > "$RUN_DIR/queue.log" 2>&1 < /dev/null) &
  echo $! > "$RUN_DIR/queued.pid"
  echo "queue: '$*' starts in $RUN_DIR when pid $other_pid (RUN_DIR $other_dir) ends; log $RUN_DIR/queue.log"
}

# Wait until the detached job ends or SECONDS pass; then its state, the log's end and the last GRPO step.
step_wait_detached() {
  local seconds="${1:?usage: bench/learning/gpu_learning.sh wait-detached SECONDS}" waited=0
  wait_while_alive "$RUN_DIR/queued.pid" "$seconds"
  if alive "$RUN_DIR/queued.pid"; then
    echo "wait-detached: still queued after ${waited} s (log $RUN_DIR/queue.log)"
    return 0
  fi
  [[ -f "$RUN_DIR/detached.pid" ]] || { echo "wait-detached: nothing was detached in $RUN_DIR" >&2; exit 2; }
  wait_while_alive "$RUN_DIR/detached.pid" "$seconds"
  if alive "$RUN_DIR/detached.pid"; then echo "wait-detached: still running after ${waited} s"; else echo "wait-detached: ended"; fi
  tail -n "${TAIL_LINES:-15}" "$RUN_DIR/detached.log"
  local metrics=()
  mapfile -t metrics < <(compgen -G "$RUN_DIR/logs/grpo-*.metrics.jsonl" | sort)
  (( ${#metrics[@]} )) || { echo "wait-detached: no GRPO metrics in $RUN_DIR/logs yet"; return 0; }
  python3 - "${metrics[@]}" <<'PY' || true
import json, sys
rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
train = [r for r in rows if "critic/score/mean" in r.get("data", {})]
if train:
    last = train[-1]["data"]
    print(f"last GRPO step {train[-1]['step']} of this run's log: reward {last['critic/score/mean']:.3f}, "
          f"step {last.get('timing_s/step', 0):.1f} s")
PY
}

# End the detached job's whole process group (the recipe, verl's driver and what they started).
step_stop() {
  if alive "$RUN_DIR/queued.pid"; then
    kill -TERM "$(cat "$RUN_DIR/queued.pid")" 2>/dev/null || true
    echo "stop: cancelled the job queued in $RUN_DIR"
  fi
  session_stop "$RUN_DIR"
}

case "${1:-}" in
  install) install_wheels ;;
  pack) step_pack ;;
  model-out) shift; step_model_out "$@" ;;
  model-in) shift; step_model_in "$@" ;;
  detach) shift; step_detach "$@" ;;
  queue) shift; step_queue "$@" ;;
  wait-detached) shift; step_wait_detached "$@" ;;
  stop) step_stop ;;
  "") echo "usage: bench/learning/gpu_learning.sh install | pack | model-out [NAME ...] | model-in DIR | <recipe stages>" \
          "| detach <recipe stages> | queue <recipe stages> | wait-detached SECONDS | stop" >&2
      exit 2 ;;
  *) bash train/recipes/recipe.sh "$@" ;;  # MODEL=blank (default) | smollm2 | a folder
esac
