#!/usr/bin/env bash
# What ran on the lent machine (issue 46's smoke check): the code after the patches moved (new, commit ea60e74, in
# /tmp/code) against the commit before the move (old, e9caa2b, in /tmp/code-old),
# alternating, at the smoke load, on one GPU. The first attempt called train_speed.sh without the lent-GPU
# environment and stopped at the interpreter check (exit 2 in progress.txt); this is the rerun.
mkdir -p /tmp/ab
cd /tmp/code && bash bench/device/gpu_smoke.sh install > /tmp/ab/install.log 2>&1
MODEL_DIR=/tmp/qwen2.5-0.5b-random bash bench/device/gpu_smoke.sh model >> /tmp/ab/install.log 2>&1
run() {  # LABEL CODE_DIR TRAIN_SPEED_SCRIPT ENV_SCRIPT
  (cd "$2" && source "$4" && env OUT=/tmp/ab/out MODEL_PATH=/tmp/qwen2.5-0.5b-random VLLM_LOGGING_LEVEL=INFO STEPS=12 \
     OURS_LABEL="$1" bash "$3" smoke ours) > "/tmp/ab/$1.log" 2>&1
  echo "$1 exit $? $(date +%T)" >> /tmp/ab/progress.txt
}
run new1 /tmp/code bench/speed/train_speed.sh bench/device/lent_gpu_env.sh
run old1 /tmp/code-old bench/train_speed.sh bench/lent_gpu_env.sh
run new2 /tmp/code bench/speed/train_speed.sh bench/device/lent_gpu_env.sh
run old2 /tmp/code-old bench/train_speed.sh bench/lent_gpu_env.sh
