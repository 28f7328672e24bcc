#!/usr/bin/env bash
# Issue 14's side-by-side measurements on one lent GPU (no network), in one detached job so that they span
# several device calls: per load, the vLLM offline ceiling, our trainer with the settings under test and TRL's
# GRPOTrainer (bench/speed/train_speed.sh), then the comparison table with both ratios.
#   bash bench/speed/speed_session.sh install | run [--dry-run] | detach | wait SECONDS | stop | pack
# install: the carried wheel chunks (+ trl in $CHUNKS/extra) and the random Qwen2.5-0.5B-shaped model
# (bench/device/gpu_smoke.sh install, model). run: every step below, each timed in $SPEED_DIR/session.txt; a failing
# step is recorded there and the next one runs. detach: run from a copy of the checkout in its own process
# session (log $SPEED_DIR/detached.log); wait: until it ends or SECONDS pass. pack: $OUT/speed.tgz.
# The settings under test: SPEED_ENV (train-script variables) and SPEED_ARGS (Hydra overrides), space-separated;
# default: CANDIDATE_ENV / CANDIDATE_ARGS below (docs/runs/speed-lab-notes/5-levers.md).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../device/lent_gpu_env.sh
source bench/device/lent_gpu_env.sh
: "${OUT:=outputs/speed_session}" "${SPEED_DIR:=/tmp/speed}" "${MODEL_DIR:=/tmp/qwen2.5-0.5b-random}"
: "${TRL_SITE:=/tmp/site-trl}" "${REALISTIC_STEPS:=5}" "${SMOKE_STEPS:=8}"
: "${TRL_REALISTIC_STEPS:=3}" "${TRL_SMOKE_STEPS:=5}"
# Measured on the H100 (docs/runs/2026-11-23-h100-speed/, docs/runs/2026-11-24-h100-speed-merge/): polling every
# 0.1 s, the LoRA adapter merged into the weights sent to vLLM (generation 1.75x -> 1.07x the offline ceiling) and
# the pre-flight inside verl's process (~30 s less start-up) became defaults; the other settings of the first
# session (scheduling limits, storage actors, reward workers, dashboard, compile cache) showed no gain. The
# candidate is therefore the defaults themselves; SPEED_ENV / SPEED_ARGS put another setting under test.
CANDIDATE_ENV=""
CANDIDATE_ARGS=""
: "${SPEED_ENV=$CANDIDATE_ENV}" "${SPEED_ARGS=$CANDIDATE_ARGS}"

# One bench/speed/train_speed.sh call per line: `LOAD WHAT STEPS [LABEL [NAME=VALUE ...] [OVERRIDE ...]]` (STEPS "-"
# where the step count does not apply). A LABEL on an `ours` line runs one more setting of ours in
# <load>/LABEL/ (train_speed.sh OURS_LABEL): its NAME=VALUE items (upper-case NAME) are train-script variables and
# the other items Hydra overrides, both on top of SPEED_ENV / SPEED_ARGS; `LOAD compare - LABEL` compares that run
# with the load's TRL run and ceiling. On `trl` and `vllm` lines the items after STEPS are that tool's flags
# (bench/speed/trl_grpo.py, bench/speed/vllm_offline.py), e.g. `realistic trl 3 --no-gradient-checkpointing`. Or
# `paths NAMES`: issue 15's paths (bench/speed/paths_session.sh run, results in its own $PATHS_DIR) between the speed
# steps, so that one machine's start-up serves both (model: $PATHS_MODEL_DIR, default $MODEL_DIR; issue 15 asks
# for the learning runs' SFT model, `bench/learning/gpu_learning.sh model-in`). Or `bench SCRIPT [FLAG ...]`: a
# bench/micro/SCRIPT.py micro-benchmark on the same machine, its JSON in $SPEED_DIR/bench/SCRIPT.json (e.g. `bench
# fused_logprob_bench --tokens 65536`). SPEED_PLAN replaces the plan: lines separated by ";".
DEFAULT_PLAN="realistic vllm -; realistic ours $REALISTIC_STEPS; realistic trl $TRL_REALISTIC_STEPS; realistic compare -;
  smoke ours $SMOKE_STEPS; smoke trl $TRL_SMOKE_STEPS; smoke vllm -; smoke compare -"
# SPEED_PLAN_FILE: the plan from a file instead (relative to the repo root; one line per step, `#` starts a
# comment), e.g. bench/speed/plans/*.plan: a long plan then needs no room in the device tool's 2,000-character command.
if [[ -n "${SPEED_PLAN_FILE:-}" ]]; then
  if [[ -n "${SPEED_PLAN:-}" ]]; then
    echo "SPEED_PLAN and SPEED_PLAN_FILE are both set; set one" >&2
    exit 2
  fi
  if [[ ! -f "$SPEED_PLAN_FILE" ]]; then
    echo "SPEED_PLAN_FILE=$SPEED_PLAN_FILE: no such file (relative paths start at $PWD)" >&2
    exit 2
  fi
  SPEED_PLAN="$(sed -e 's/#.*//' "$SPEED_PLAN_FILE" | tr '\n' ';')"
fi
: "${SPEED_PLAN:=$DEFAULT_PLAN}"
PLAN=()
while IFS= read -r line; do
  read -r line <<< "$line"  # trims the blanks around it
  if [[ -n "$line" ]]; then PLAN+=("$line"); fi
done < <(tr ';' '\n' <<< "$SPEED_PLAN")

# The environment and arguments of one plan line, as a command: train_speed.sh's OUT is $SPEED_DIR.
command_of() {
  local load what steps label="" extra=() line_env=() line_args=() item
  read -r load what steps label <<< "$1"
  if [[ "$load" == paths ]]; then
    printf '%q ' env "PATHS=$what${steps:+ $steps}${label:+ $label}" "MODEL_DIR=${PATHS_MODEL_DIR:-$MODEL_DIR}" \
      bash bench/speed/paths_session.sh run
    return 0
  fi
  if [[ "$load" == bench ]]; then
    local flags=()
    read -r -a flags <<< "$1"
    if [[ ! "$what" =~ ^[a-z0-9_]+$ || ! -f "bench/micro/$what.py" ]]; then
      echo "SPEED_PLAN: line '$1': no bench/micro/$what.py (a bench line is 'bench SCRIPT [FLAG ...]')" >&2
      exit 2
    fi
    flags=("${flags[@]:2}")
    printf '%q ' "${PYTHON:-python3}" "bench/micro/$what.py" --out "$SPEED_DIR/bench/$what.json" ${flags[@]+"${flags[@]}"}
    return 0
  fi
  if [[ ! "$load" =~ ^(realistic|smoke)$ || ! "$what" =~ ^(vllm|ours|trl|compare)$ ]]; then
    echo "SPEED_PLAN: unknown line '$1'; lines are 'LOAD WHAT STEPS [LABEL ...]' (LOAD realistic|smoke, WHAT" \
      "vllm|ours|trl|compare), 'paths NAMES' or 'bench SCRIPT [FLAG ...]'" >&2
    exit 2
  fi
  read -r -a extra <<< "$label"
  label="${extra[0]:-}"
  if [[ "$what" =~ ^(trl|vllm)$ ]]; then
    line_args=(${extra[@]+"${extra[@]}"})
    label=""
  elif [[ -n "$label" ]]; then
    if [[ ! "$label" =~ ^[A-Za-z0-9_-]+$ ]]; then
      echo "SPEED_PLAN: line '$1': a LABEL is letters, digits, '_' or '-'" >&2
      exit 2
    fi
    for item in "${extra[@]:1}"; do
      if [[ "$what" != ours ]]; then
        echo "SPEED_PLAN: line '$1': settings go on the 'ours' line, not on 'compare'" >&2
        exit 2
      fi
      if [[ "$item" =~ ^[A-Z_][A-Z0-9_]*= ]]; then line_env+=("$item"); else line_args+=("$item"); fi
    done
  fi
  # VLLM_LOGGING_LEVEL=INFO: vLLM's own start-up lines (compile and graph-capture times) reach the log for
  # bench/startup/startup_breakdown.py; verl sets WARN for its workers unless the environment has a level
  local cmd=(env "OUT=$SPEED_DIR" "MODEL_PATH=$MODEL_DIR" "TRL_PYTHONPATH=$TRL_SITE" "VLLM_LOGGING_LEVEL=INFO")
  if [[ "$steps" != - ]]; then cmd+=("STEPS=$steps"); fi
  if [[ -n "$label" ]]; then cmd+=("OURS_LABEL=$label"); fi
  local items=()
  if [[ "$what" == ours ]]; then
    read -r -a items <<< "$SPEED_ENV"
    cmd+=(${items[@]+"${items[@]}"} ${line_env[@]+"${line_env[@]}"})
  fi
  cmd+=(bash bench/speed/train_speed.sh "$load" "$what")
  if [[ "$what" == ours ]]; then
    read -r -d '' -a items <<< "$SPEED_ARGS" || true
    cmd+=(${items[@]+"${items[@]}"})
  fi
  cmd+=(${line_args[@]+"${line_args[@]}"})
  printf '%q ' "${cmd[@]}"
}

step_run() {
  local line
  for line in "${PLAN[@]}"; do command_of "$line" > /dev/null; done  # a bad line stops before anything runs
  if [[ "${1:-}" == --dry-run ]]; then
    for line in "${PLAN[@]}"; do command_of "$line"; printf '\n'; done
    return 0
  fi
  mkdir -p "$SPEED_DIR/bench"
  # SPEED_MONITOR=1: GPU utilization and the busiest processes each second (bench/profile/monitor.sh; read them with
  # bench/profile/monitor_summary.py), to tell which phases wait on the CPU
  if [[ "${SPEED_MONITOR:-1}" == 1 ]]; then
    bash bench/profile/monitor.sh "$SPEED_DIR/monitor" &
    monitor_pid=$!
    trap 'kill "$monitor_pid" 2>/dev/null || true' EXIT
  fi
  echo "settings under test: SPEED_ENV='$SPEED_ENV' SPEED_ARGS='${SPEED_ARGS//$'\n'/ }'" >> "$SPEED_DIR/session.txt"
  for line in "${PLAN[@]}"; do session_step "$SPEED_DIR" "$line" "$(command_of "$line")"; done
}

# Packed with the session (every `wait` and `pack`): all runs of ours and TRL so far in one table, each against the
# TRL run closest before it (bench/speed/session_table.py)
session_summary() {
  "${PYTHON:-python3}" bench/speed/session_table.py "$1" --out "$1/session.md" > /dev/null 2>&1
}

session_main bench/speed/speed_session.sh "$SPEED_DIR" "$OUT/speed.tgz" "$@"
