#!/usr/bin/env bash
# Sample the machine once a second while a bench session runs, to tell a CPU-bound phase from a GPU-bound one:
#   bash bench/profile/monitor.sh DIR      (runs until killed; bench/speed/speed_session.sh starts it with SPEED_MONITOR=1)
# DIR/gpu.csv: nvidia-smi's time, GPU utilization %, SM clock MHz, power W, memory MiB (absent without nvidia-smi).
# DIR/top.txt: per second, top's clock line and its 15 busiest processes with their full command lines (Ray and
# vLLM name theirs: ray::vLLMHttpServer, VLLM::EngineCore, ray::WorkerDict...). bench/profile/monitor_summary.py reads both.
# Both are appended to, so a second job in the same session (another `speed_session.sh detach`) keeps the first's.
set -euo pipefail
dir="${1:?usage: bench/profile/monitor.sh DIR}"
mkdir -p "$dir"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw,memory.used \
    --format=csv,noheader,nounits -lms 1000 >> "$dir/gpu.csv" &
  pids+=($!)
fi
# top's first frame reports CPU use since each process started; the frames after it, the last second's
top -b -c -w 400 -d 1 -o %CPU | awk '/^top - / { rows = 0; print; fflush(); next } /^ *PID / { rows = 1; next }
  rows >= 1 && rows <= 15 { print; rows++ }' >> "$dir/top.txt" &
pids+=($!)
wait
