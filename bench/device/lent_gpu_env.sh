# shellcheck shell=bash
# Sourced by the lent-GPU evidence scripts (bench/device/gpu_smoke.sh, bench/learning/gpu_learning.sh): where the carried wheel
# chunks and their install live on that machine, the environment the stack runs with, and the install step.
: "${CHUNKS:=/tmp/chunks}" "${SITE:=/tmp/site}"
export PYTHONPATH="$SITE:$PWD" VLLM_USE_FLASHINFER_SAMPLER=0 RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# The lent multi-GPU hosts forbid NVLink multicast (.library/device/KINDS.md: it can take the shared GPUs out of
# service). The image sets the first three; export them again so Ray workers and vLLM's TP workers surely inherit
# them, and keep vLLM's all-reduce off torch symmetric memory (its multimem path).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
# System libraries carried next to the wheels when the image lacks them (docs/wheelhouse.md: libnuma.so.1 for
# sgl_kernel): the loader looks there first.
if [[ -d "$SITE/sysdeps" ]]; then export LD_LIBRARY_PATH="$SITE/sysdeps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi

# Install the chunks in $CHUNKS into $SITE (verified, offline; a second run is a no-op), with the bytecode written
# unless WHEELHOUSE_BYTECODE=0 (to time imports without it: bench/startup/import_cost.py, then `wheelhouse compile`).
install_wheels() {
  local bytecode=()
  if [[ "${WHEELHOUSE_BYTECODE:-1}" == 0 ]]; then bytecode=(--no-bytecode); fi
  python3 -m verl_ext.wheelhouse install --chunks "$CHUNKS" --target-dir "$SITE" ${bytecode[@]+"${bytecode[@]}"} 2>&1 | tail -5
}

# What tells one lent machine from another, for reading its timings beside other sessions' (machine M of
# docs/runs/2026-11-25-h100-one-machine/NOTES.md, section 0k started everything ~2x slower than machine L with the same code): CPU, cores, memory,
# whether $SITE has its bytecode (.py files against this interpreter's .pyc files) and the seconds a fresh
# interpreter takes to import torch (imports are most of the start-up, docs/runs/speed-lab-notes/3-vllm-ceiling.md, section 3). The GPU is in
# gpu.txt, which session_pack writes.
machine_facts() {
  local python="${PYTHON:-python3}" version tag py pyc
  read -r version tag < <("$python" -c 'import platform, sys; print(platform.python_version(), sys.implementation.cache_tag)')
  read -r py pyc < <(find "$SITE" \( -name '*.py' -o -name "*.$tag.pyc" \) 2>/dev/null |
                       awk '/\.py$/ {py++} /\.pyc$/ {pyc++} END {print py + 0, pyc + 0}')
  echo "date: $(date '+%F %T %Z')"
  echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); cores: $(nproc)"
  echo "memory: $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "python: $version ($tag)"
  echo "site: $SITE: $py .py files, $pyc $tag .pyc files; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
  echo "import torch: $("$python" -c 'import time; t = time.perf_counter(); import torch; print(f"{time.perf_counter() - t:.2f} s")' 2>&1 | tail -1)"
}

# One detached job per host (bench/learning/gpu_learning.sh, bench/speed/speed_session.sh): two verl runs with their own Ray
# clusters share verl 0.9.1's weight-sync socket path and hang (docs/runs/2026-11-23-h100-run4/).
: "${DETACH_LOCK:=/tmp/verl-ext-detached.pid}"

# ROOT/NAME (and PATH... relative to ROOT) without weights, checkpoints or data into FILE, written in the temporary
# folder (mktemp) and then moved, so FILE is always a whole archive: tar_run ROOT NAME FILE [PATH...]
tar_run() {
  local root="$1" name="$2" file="$3" part
  shift 3
  part="$(mktemp -t tar_run.XXXXXX)" || return 1
  if tar czf "$part" -C "$root" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.parquet' \
       --exclude="$name/model" --exclude="$name/sft" --exclude="$name/grpo" --exclude="$name/sft_hf" \
       --exclude="$name/grpo_hf" "$name" "$@"; then
    mv -f "$part" "$file"
  else
    rm -f "$part"
    return 1
  fi
}

# Everything small of a run folder, with the GPU it ran on in gpu.txt, into OUT/NAME.tgz
# (bench/learning/gpu_shared_cold_start.sh, gpu_sft_sweep.sh): pack_run_dir ROOT NAME OUT
pack_run_dir() {
  local root="$1" name="$2" out="$3"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$root/$name/gpu.txt" 2>&1 || true
  tar_run "$root" "$name" "$out/$name.tgz"
}

# The run folders under a driver's ROOT, one per line (ROOT/NAME/): those with logs/ or run.log, not the copied
# checkout (code) or the driver's own packs (out). Run folder names hold no spaces (run file names).
run_dirs() {
  local dir name
  for dir in "$1"/*/; do
    name="$(basename "$dir")"
    [[ "$name" == code || "$name" == out ]] && continue
    if [[ -d "$dir/logs" || -f "$dir/run.log" ]]; then echo "$dir"; fi
  done
}

# For the last call of a lent-GPU session: every run folder under each ROOT as it stands, into OUT/<root>-<name>.tgz
# (the cold start's with the driver's logs, ROOT/*.log), each archive whole: collect_out OUT ROOT... . The driver
# packs a run only when a stage ends; a GRPO stage still running is packed here. Repeated every few seconds until
# the call's limit, a call cut by the device budget still returns the last complete set
# (docs/runs/2026-11-27-h200x2-smollm2-split-tactical/: both runs' step-100 validation came back with 16 s left):
#   for i in $(seq 20); do collect_out "$OUT" /tmp/ab /tmp/games; sleep 8; done
# Two roots of one cold start and three runs each stay within the 8 files the device tool returns.
collect_out() {
  local out="$1" root tag dir name logs
  shift
  mkdir -p "$out"
  for root in "$@"; do
    [[ -d "$root" ]] || { echo "collect_out: no $root" >&2; continue; }
    tag="$(basename "$root")"
    for dir in $(run_dirs "$root"); do
      name="$(basename "$dir")"
      logs=()
      if [[ "$name" == base ]]; then
        mapfile -t logs < <(cd "$root" && compgen -G '*.log')
      fi
      tar_run "$root" "$name" "$out/$tag-$name.tgz" ${logs[@]+"${logs[@]}"} || echo "collect_out: could not pack $dir" >&2
    done
  done
}

# The watch calls of a lent-GPU session, sent in the same batch of tool calls as the carry and the launch (a
# machine left idle ~30 s between two calls goes back with the runs: docs/runs/2026-11-28-h100x4-cards-lost/):
# collect_out every 10 s until every ROOT's driver has ended (ROOT/ALL_RUNS_ENDED, bench/learning/
# gpu_shared_cold_start.sh) or SECONDS have passed, then one line per run (run_progress):
#   collect_until "$OUT" 580 /tmp/pk /tmp/hk
# Later watch calls of the batch return at once once the runs have ended, and the machine goes back.
# A ROOT that still does not exist after COLLECT_ROOT_GRACE_S (default 60: a driver creates its ROOT as it starts)
# is a mistyped one: the call says so and returns 2 instead of waiting out SECONDS for a driver that never ends.
collect_until() {
  local out="$1" seconds="$2" start="$SECONDS" root ended missing
  shift 2
  [[ "$seconds" =~ ^[0-9]+$ ]] || { echo "collect_until: SECONDS must be a whole number, got '$seconds'" >&2; return 2; }
  while :; do
    collect_out "$out" "$@" 2> /dev/null
    missing=()
    for root in "$@"; do [[ -d "$root" ]] || missing+=("$root"); done
    if (( ${#missing[@]} && SECONDS - start >= ${COLLECT_ROOT_GRACE_S:-60} )); then
      echo "collect_until: no driver folder ${missing[*]} after ${COLLECT_ROOT_GRACE_S:-60} s: a mistyped ROOT?" \
        "(a driver creates its ROOT as it starts; the watched ones: $*)" >&2
      run_progress "$@" 2> /dev/null
      return 2
    fi
    ended=1
    for root in "$@"; do [[ -f "$root/ALL_RUNS_ENDED" ]] || ended=0; done
    (( ended || SECONDS - start >= seconds )) && break
    sleep "${COLLECT_EVERY_S:-10}"
  done
  run_progress "$@"
  if (( ended )); then echo "collect_until: every driver has ended ($*)"; fi
}

# One line per run folder under each ROOT: its finished stages (*.done) and its GRPO log's last progress bar.
run_progress() {
  local root dir name log bar done_stages
  for root in "$@"; do
    for dir in $(run_dirs "$root"); do
      name="$(basename "$dir")"
      # `|| true`: no match is an answer here, also in a caller's `set -e -o pipefail`
      done_stages="$( (cd "$dir" && compgen -G '*.done' || true) | sed 's/\.done$//' | sort | paste -s -d ' ' -)"
      log="$( (compgen -G "$dir/logs/grpo-*.log" || true) | sort | tail -n 1)"
      bar=""
      if [[ -n "$log" ]]; then
        bar="$(tail -c 4000 "$log" | tr '\r' '\n' | { grep -a -o 'Training Progress: *[0-9]*%[^]]*]' || true; } | tail -n 1)"
      fi
      echo "$(basename "$root")/$name: done [${done_stages}] ${bar}"
    done
  done
}

# Copy the checkout (without wheels, outputs, venv and git) into DIR, replacing what was there: a detached job
# runs from the copy, which later calls that refresh the working tree cannot change under it.
copy_checkout() {
  rm -rf "$1" && mkdir -p "$1"
  # GNU tar exits 1 when a file changed while it was read (a test run beside writing its caches: CI on 2026-11-27
  # saw `tar: .: file changed as we read it`): the copy is whole for the files the job runs, so that is no failure
  { tar cf - --warning=no-file-changed --exclude=./.whl --exclude=./outputs --exclude=./.venv --exclude=./.git \
      --exclude=__pycache__ --exclude=.pytest_cache . || (( $? == 1 )); } | tar xf - -C "$1"
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

# Run `SCRIPT ARGS` (bench/learning/gpu_learning.sh, bench/speed/speed_session.sh, bench/speed/paths_session.sh) as the host's one
# detached job, from a copy of the checkout in DIR/code, in its own process session (log DIR/detached.log):
#   session_detach DIR SCRIPT ARGS...
session_detach() {
  local dir="$1" script="$2" other_pid other_dir
  shift 2
  if host_job_running; then
    echo "detach: a detached job is already running on this host (pid $other_pid, RUN_DIR $other_dir): two verl" \
      "runs here share verl's weight-sync socket path and hang; stop it first (the stop of the script that" \
      "started it, with that folder)" >&2
    exit 2
  fi
  mkdir -p "$dir"
  copy_checkout "$dir/code"
  setsid bash "$dir/code/$script" "$@" > "$dir/detached.log" 2>&1 < /dev/null &
  echo $! > "$dir/detached.pid"
  echo "$! $dir" > "$DETACH_LOCK"
  echo "detach: '$*' running as pid $! (process group), log $dir/detached.log"
}

# Run one step of a session's plan, recording its end, status and seconds in DIR/session.txt (and its start in
# DIR/current_step, which `wait` prints); a failing step is recorded and the plan goes on: session_step DIR LABEL COMMAND
# A step that runs longer than SESSION_STEP_TIMEOUT seconds (default 900; 0: no limit) is ended, and what it left
# behind (Ray's processes, vLLM's engine core) with it, so that one hung run does not use up the machine's hold.
session_step() {
  local dir="$1" label="$2" command="$3" started=$SECONDS status=ok limit="${SESSION_STEP_TIMEOUT:-900}"
  echo "=== $label ==="
  echo "$(date '+%F %T') $label" > "$dir/current_step"
  if [[ "$limit" == 0 ]]; then
    bash -c "$command" || status="FAILED (exit $?)"
  else
    timeout -k 20 "$limit" bash -c "$command" || status="FAILED (exit $?)"
    if [[ "$status" == "FAILED (exit 124)" || "$status" == "FAILED (exit 137)" ]]; then
      status="TIMED OUT after $limit s"
      end_leftovers
    fi
  fi
  echo "$(date '+%F %T') $label: $status, $(( SECONDS - started )) s" | tee -a "$dir/session.txt"
}

# Wait until DIR's detached job ends or SECONDS pass; then the plan's record and the log's end.
session_wait() {
  local dir="$1" seconds="$2" waited=0
  [[ -f "$dir/detached.pid" ]] || { echo "wait: nothing was detached in $dir" >&2; exit 2; }
  wait_while_alive "$dir/detached.pid" "$seconds"
  if alive "$dir/detached.pid"; then
    # the machine's own clock: session.txt stamps each step's end, so the remaining time starts from here
    echo "wait: still running after ${waited} s; now $(date '+%F %T'), running since $(cat "$dir/current_step" 2>/dev/null || echo '?')"
  else
    echo "wait: ended $(date '+%F %T')"
  fi
  cat "$dir/session.txt" 2>/dev/null || true
  tail -n "${TAIL_LINES:-5}" "$dir/detached.log"
}

# End what a verl run leaves outside its job's process group: Ray's cluster and its workers (the FSDP worker,
# vLLM's server and engine core). After a group kill they held 43 GiB of the GPU two minutes later, and the next
# run died out of memory (docs/runs/2026-11-25-h100-breakable/).
# LEFTOVER_PATTERN: the command lines to end (pkill -f); the tests set a marker of their own.
# SIGKILL is delivered asynchronously: wait (up to LEFTOVER_WAIT tenths of a second, 100) until none of them runs
# any more (zombies waiting for their parent count as ended), so the next step never starts beside a dying one.
end_leftovers() {
  local pattern="${LEFTOVER_PATTERN:-VLLM::EngineCore|ray::}" tenths=0 left
  if [[ -x "$SITE/bin/ray" ]]; then "$SITE/bin/ray" stop --force > /dev/null 2>&1 || true; fi
  pkill -9 -f "$pattern" 2> /dev/null || true
  while left="$(live_matches "$pattern")"; [[ -n "$left" ]] && (( tenths < ${LEFTOVER_WAIT:-100} )); do
    sleep 0.1
    tenths=$((tenths + 1))
  done
  if [[ -n "$left" ]]; then echo "stop: processes $left matching '$pattern' still run after $((tenths / 10)) s" >&2; fi
}

# The pids (comma-separated) whose command line matches PATTERN and that are not zombies.
live_matches() {
  local pid stat live=()
  for pid in $(pgrep -f "$1" || true); do
    stat="$(cat "/proc/$pid/stat" 2> /dev/null)" || continue
    stat="${stat##*) }"  # the state follows the command name, which may hold spaces and parentheses
    [[ "${stat%% *}" == Z ]] || live+=("$pid")
  done
  (IFS=,; echo "${live[*]}")
}

# Wait up to SECONDS until no process holds a GPU (where nvidia-smi exists); name the ones left.
wait_gpu_free() {
  command -v nvidia-smi > /dev/null || return 0
  local waited=0 left
  while left="$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | paste -sd, -)"
        [[ -n "$left" ]] && (( waited < $1 )); do
    sleep 2
    waited=$((waited + 2))
  done
  if [[ -n "$left" ]]; then echo "stop: processes $left still hold the GPU after $waited s" >&2; fi
}

# End DIR's detached job: its whole process group, then what it left outside the group, then wait for the GPU.
session_stop() {
  local dir="$1" pid
  alive "$dir/detached.pid" || { echo "stop: no detached job running in $dir"; return 0; }
  pid="$(cat "$dir/detached.pid")"
  kill -TERM -- "-$pid" 2>/dev/null || true
  sleep 5
  kill -KILL -- "-$pid" 2>/dev/null || true
  end_leftovers
  wait_gpu_free "${STOP_GPU_WAIT:-60}"
  echo "stop: ended process group $pid and Ray's processes"
}

# Everything DIR holds except checkpoints, weights, parquet, scratch and the code copy, plus the GPUs' names,
# as one archive (the harness returns few files): session_pack DIR ARCHIVE
session_pack() {
  local dir="$1" archive="$2"
  mkdir -p "$(dirname "$archive")"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$dir/gpu.txt" 2>&1 || true
  # a session script's own summary of what it has so far (speed_session.sh: session.md), never fatal
  if declare -F session_summary > /dev/null; then session_summary "$dir" || true; fi
  tar czf "$archive" -C "$dir" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.parquet' \
    --exclude=checkpoints --exclude=trl_work --exclude=code --exclude=merged .
  ls -la "$archive"
}

# The subcommands every session script has; its own `step_run` runs the plan:
#   session_main SCRIPT DIR ARCHIVE "$@"   (install | run [--dry-run] | detach | wait SECONDS | stop | pack)
session_main() {
  local script="$1" dir="$2" archive="$3"
  shift 3
  case "${1:-}" in
    # install keeps its output and the machine's facts in the session folder, so that `pack` brings them back
    install) mkdir -p "$dir"
             { bash bench/device/gpu_smoke.sh install && MODEL_DIR="$MODEL_DIR" bash bench/device/gpu_smoke.sh model; } 2>&1 |
               tee "$dir/install.log"
             machine_facts | tee "$dir/machine.txt" ;;
    run) shift; step_run "$@" ;;
    detach) session_detach "$dir" "$script" run ;;
    # wait also packs: every call that waits brings the evidence so far back, so a machine lost between two
    # calls (one went idle during an interruption on our side in section 0h) loses only the running step
    wait) session_wait "$dir" "${2:?usage: $script wait SECONDS}"
          session_pack "$dir" "$archive" | sed 's/^/wait: packed /' ;;
    stop) session_stop "$dir" ;;
    pack) session_pack "$dir" "$archive" ;;
    *) echo "usage: $script install | run [--dry-run] | detach | wait SECONDS | stop | pack" >&2
       exit 2 ;;
  esac
}
