#!/usr/bin/env bash
# Rollout settings one after another through bench/speed/train_speed.sh, then one table of all of them.
#   MODEL_PATH=/models/qwen bash bench/speed/rollout_sweep.sh smoke|realistic [--dry-run] [NAME ...]
# Settings: bench/speed/rollout_sweep.settings (SETTINGS=file for another list); NAMEs pick some (default: all).
# Each setting runs with OUT=$OUT/<name> (OUT defaults to outputs/rollout_sweep) and STEPS as train_speed.sh
# reads it; the table goes to $OUT/<load>.md. --dry-run prints the commands instead of running them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
load="${1:-}"
if [[ "$load" != smoke && "$load" != realistic ]]; then
  echo "usage: bench/speed/rollout_sweep.sh smoke|realistic [--dry-run] [NAME ...]" >&2
  exit 2
fi
shift
dry_run=0
wanted=()
for arg in "$@"; do
  if [[ "$arg" == --dry-run ]]; then dry_run=1; else wanted+=("$arg"); fi
done
: "${SETTINGS:=bench/speed/rollout_sweep.settings}" "${OUT:=outputs/rollout_sweep}" "${PYTHON:=python3}"
if [[ ! -f "$SETTINGS" ]]; then
  echo "SETTINGS=$SETTINGS: no such file" >&2
  exit 2
fi

trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

names=() commands=()
line_no=0
while IFS= read -r line || [[ -n "$line" ]]; do
  line_no=$(( line_no + 1 ))
  if [[ -z "$(trim "$line")" || "$(trim "$line")" == \#* ]]; then continue; fi
  IFS='|' read -r name kind envs args extra <<< "$line"
  name="$(trim "$name")" kind="$(trim "${kind:-}")" envs="$(trim "${envs:-}")" args="$(trim "${args:-}")"
  if [[ -n "${extra:-}" || ! "$name" =~ ^[A-Za-z0-9_-]+$ || ( "$kind" != ours && "$kind" != vllm ) ]]; then
    echo "$SETTINGS:$line_no: expected 'name | ours|vllm | ENV=value ... | arguments', got: $line" >&2
    exit 2
  fi
  if (( ${#wanted[@]} )) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  cmd=(env "OUT=$OUT/$name")
  if [[ "$envs" != - ]]; then
    read -r -a env_items <<< "$envs"
    for item in "${env_items[@]}"; do
      if [[ ! "$item" =~ ^[A-Z_][A-Z0-9_]*=.+$ ]]; then
        echo "$SETTINGS:$line_no: environment item '$item' is not NAME=value" >&2
        exit 2
      fi
    done
    cmd+=("${env_items[@]}")
  fi
  cmd+=(bash bench/speed/train_speed.sh "$load" "$kind")
  if [[ "$args" != - ]]; then
    read -r -a arg_items <<< "$args"
    cmd+=("${arg_items[@]}")
  fi
  names+=("$name")
  commands+=("$(printf '%q ' "${cmd[@]}")")
done < "$SETTINGS"

for wanted_name in ${wanted[@]+"${wanted[@]}"}; do
  if [[ " ${names[*]} " != *" $wanted_name "* ]]; then
    echo "no setting named '$wanted_name' in $SETTINGS" >&2
    exit 2
  fi
done

table=("$PYTHON" bench/speed/sweep_table.py "$OUT" --load "$load" --settings "$SETTINGS" --out "$OUT/$load.md")
for i in "${!names[@]}"; do
  if (( dry_run )); then
    echo "${commands[$i]}"
    continue
  fi
  echo "=== rollout sweep: ${names[$i]} ==="
  mkdir -p "$OUT/${names[$i]}"
  # one setting failing (e.g. out of memory) must not stop the others; its row says so
  if ! bash -c "${commands[$i]}"; then
    echo "setting ${names[$i]} failed" | tee "$OUT/${names[$i]}/FAILED"
  fi
done
if (( dry_run )); then
  printf '%q ' "${table[@]}"
  printf '\n'
else
  "${table[@]}"
fi
