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

# One detached job per host (bench/gpu_learning.sh, bench/speed_session.sh): two verl runs with their own Ray
# clusters share verl 0.9.1's weight-sync socket path and hang (docs/runs/2026-11-23-h100-run4/).
: "${DETACH_LOCK:=/tmp/verl-ext-detached.pid}"

# Copy the checkout (without wheels, outputs, venv and git) into DIR, replacing what was there: a detached job
# runs from the copy, which later calls that refresh the working tree cannot change under it.
copy_checkout() {
  rm -rf "$1" && mkdir -p "$1"
  tar cf - --exclude=./.whl --exclude=./outputs --exclude=./.venv --exclude=./.git . | tar xf - -C "$1"
}

# True while the host's detached job ($DETACH_LOCK) runs; sets the caller's other_pid and other_dir from the lock.
# shellcheck disable=SC2034  # other_dir is read by the callers
host_job_running() {
  other_pid="" other_dir=""
  [[ -f "$DETACH_LOCK" ]] && read -r other_pid other_dir < "$DETACH_LOCK" && kill -0 "$other_pid" 2>/dev/null
}

# True while the process in pid file FILE runs.
alive() {
  [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Sleep while pid file FILE's process runs, counting the caller's `waited` up to SECONDS: wait_while_alive FILE SECONDS
wait_while_alive() {
  while alive "$1" && (( waited < $2 )); do sleep 5; waited=$((waited + 5)); done
}
