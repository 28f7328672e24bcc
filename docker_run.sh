#!/usr/bin/env bash
# Run a command in the verl-ext GPU image, with this repo mounted at /workspace/verl-ext (default command: bash).
#   ./docker_run.sh [--pull | --build] [--dry-run] [--] [command...]
#     --pull     pull IMAGE from its registry first     --build    rebuild IMAGE even if it exists locally
#     --dry-run  print the docker commands, run nothing (an existing local image is still looked up)
# IMAGE is built from docker/Dockerfile when missing locally. Options go before the command; the rest is the command.
# Settings (environment, else .env): IMAGE, VERL_EXT_TARGET=vllm|sglang, GPUS=all|none|0,1, SHM_SIZE (empty:
# --ipc=host), MAP_HOST_USER=1|0, DOCKER_RUN_ARGS, HF_HOME (host cache, same path inside). See docs/docker.md.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKDIR=/workspace/verl-ext
SETTINGS=(IMAGE VERL_EXT_TARGET GPUS SHM_SIZE MAP_HOST_USER DOCKER_RUN_ARGS HF_HOME)

die() { echo "docker_run.sh: $*" >&2; exit 2; }

# This script's own settings may come from .env, which is parsed (never sourced, never printed); the environment wins.
if [[ -f "$REPO_ROOT/.env" ]]; then
  for name in "${SETTINGS[@]}"; do
    [[ -n "${!name+set}" ]] && continue
    line="$(grep -E "^${name}=" "$REPO_ROOT/.env" | tail -n 1 || true)"
    [[ -n "$line" ]] && printf -v "$name" '%s' "${line#*=}"
  done
fi
: "${VERL_EXT_TARGET:=vllm}"
: "${IMAGE:=verl-ext:$VERL_EXT_TARGET}"
: "${GPUS:=all}" "${SHM_SIZE:=}" "${MAP_HOST_USER:=1}" "${DOCKER_RUN_ARGS:=}"
HOST_HF_HOME="${HF_HOME:-$HOME/.cache/huggingface}"
HOST_HF_HOME="${HOST_HF_HOME/#\~/$HOME}"

PULL=0 BUILD=0 DRY_RUN=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pull) PULL=1 ;;
    --build) BUILD=1 ;;
    --dry-run) DRY_RUN=1 ;;
    -h | --help) sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (options go before the command; see --help)" ;;
    *) break ;;
  esac
  shift
done
[[ $# -gt 0 ]] || set -- bash
[[ "$PULL$BUILD" != 11 ]] || die "--pull and --build exclude each other"
[[ "$VERL_EXT_TARGET" =~ ^(vllm|sglang)$ ]] || die "VERL_EXT_TARGET must be vllm or sglang, got '$VERL_EXT_TARGET'"
[[ "$GPUS" =~ ^[A-Za-z0-9,-]+$ ]] || die "GPUS must be all, none or device ids like 0,1; got '$GPUS'"
[[ "$MAP_HOST_USER" =~ ^[01]$ ]] || die "MAP_HOST_USER must be 0 or 1, got '$MAP_HOST_USER'"
[[ "$HOST_HF_HOME" == /* ]] || die "HF_HOME must be an absolute path (or ~/...), got '$HOST_HF_HOME'"
if [[ "$DRY_RUN" == 0 ]] && ! command -v docker >/dev/null; then
  die "docker not found; install Docker and the NVIDIA Container Toolkit (docs/docker.md)"
fi

# --dry-run prints a command instead of running it, each word single-quoted where the shell needs it.
run() {
  if [[ "$DRY_RUN" == 0 ]]; then "$@"; return; fi
  local word words=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then words+=("$word"); else words+=("'${word//\'/\'\\\'\'}'"); fi
  done
  echo "${words[*]}"
}

uid="$(id -u)" gid="$(id -g)"
# The image's USER ("uid:gid"); the lookup fails when the image is not present locally.
image_user() { docker image inspect --format '{{.Config.User}}' "$IMAGE" 2>/dev/null; }

present=0 user_in_image=""
if user_in_image="$(image_user)"; then present=1; fi
if [[ "$PULL" == 1 ]]; then
  run docker pull "$IMAGE"
  [[ "$DRY_RUN" == 1 ]] || user_in_image="$(image_user || true)"
elif [[ "$BUILD" == 1 || "$present" == 0 ]]; then
  build=(docker build --file "$REPO_ROOT/docker/Dockerfile" --build-arg "VERL_EXT_TARGET=$VERL_EXT_TARGET")
  if [[ "$uid" != 0 ]]; then  # the image's user gets your UID/GID (root hosts keep the default 1000)
    build+=(--build-arg "USER_UID=$uid" --build-arg "USER_GID=$gid")
    user_in_image="$uid:$gid"
  fi
  run env DOCKER_BUILDKIT=1 "${build[@]}" --tag "$IMAGE" "$REPO_ROOT"
fi

args=(run --rm --init --workdir "$WORKDIR")
if [[ -t 0 && -t 1 ]]; then args+=(-it); elif [[ -t 0 ]]; then args+=(-i); fi
case "$GPUS" in
  none) ;;
  all) args+=(--gpus all) ;;
  *) args+=(--gpus "\"device=$GPUS\"") ;;  # the quotes keep the comma inside one --gpus value
esac
if [[ -n "$SHM_SIZE" ]]; then args+=(--shm-size "$SHM_SIZE"); else args+=(--ipc=host); fi
args+=(--ulimit memlock=-1 --ulimit stack=67108864)
# The HF cache keeps its host path inside, so HF_HOME means the same folder wherever it is read (even from .env).
args+=(--volume "$REPO_ROOT:$WORKDIR" --volume "$HOST_HF_HOME:$HOST_HF_HOME")
if [[ -f "$REPO_ROOT/.env" ]]; then args+=(--env-file "$REPO_ROOT/.env"); fi
# Variables named in .env.example and exported in this shell go in by name only: values never reach argv or output.
if [[ -f "$REPO_ROOT/.env.example" ]]; then
  exported=" $(compgen -e | tr '\n' ' ') "
  while read -r name; do
    [[ " ${SETTINGS[*]} " == *" $name "* ]] && continue
    [[ "$exported" == *" $name "* ]] && args+=(--env "$name")
  done < <(sed -nE 's/^#? ?([A-Z][A-Z0-9_]*)=.*/\1/p' "$REPO_ROOT/.env.example" | sort -u)
fi
args+=(--env "HF_HOME=$HOST_HF_HOME")  # --env wins over --env-file
if [[ "$MAP_HOST_USER" == 1 ]]; then
  args+=(--user "$uid:$gid")
  # A UID the image does not know has no home (HOME=/): give Triton, vLLM and pip caches a writable one.
  if [[ "$uid" != 0 && "$user_in_image" != "$uid:$gid" ]]; then args+=(--env HOME=/tmp/home); fi
fi
if [[ -n "$DOCKER_RUN_ARGS" ]]; then
  read -r -a extra <<<"$DOCKER_RUN_ARGS"
  args+=("${extra[@]}")
fi
args+=("$IMAGE" "$@")

if [[ "$DRY_RUN" == 0 ]]; then
  mkdir -p "$HOST_HF_HOME"  # else docker creates it owned by root
  exec docker "${args[@]}"
fi
run docker "${args[@]}"
