# shellcheck shell=bash
# Stop one Ray cluster of several on a host (sourced by bench/learning/gpu_shared_cold_start.sh).
#   stop_ray_cluster TEMP_DIR PORT [GRACE_S]
# `ray stop` stops every cluster on the host, so a driver whose runs each started their own (`ray start --head
# --temp-dir=TEMP_DIR`) used to leave them all running when it ended: their ports stayed held (the next driver
# needed another RAY_PORT_BASE) and their object stores kept their memory. A cluster's own processes (GCS, raylet,
# monitors) name TEMP_DIR in their arguments; the raylet's agents (ray::DashboardAgent, ray::RuntimeEnvAgent) do
# not, and outlive a killed raylet; the Ray client server names only the GCS address (--address=HOST:PORT). So
# this takes the processes naming TEMP_DIR or that address and all their descendants, sends them SIGTERM, and
# sends SIGKILL to whatever is left after GRACE_S seconds (default 15). Measured on the dev
# machine (2026-11-29, Ray of verl 0.9.1): after the GCS, raylet and monitors were killed, the agents stayed up
# with parent 1.

# The PIDs of the processes naming $1 (or --address=HOST:$2) in their arguments and of every descendant of them.
ray_cluster_pids() {
  local temp_dir="$1" port="$2" table pid
  table="$(ps -ww -eo pid=,ppid=,args=)"  # -ww: a piped ps cuts long argument lists
  local -a found=() queue=()
  while read -r pid _; do
    [[ -n "$pid" && "$pid" != "$$" && "$pid" != "$BASHPID" ]] && queue+=("$pid")
  done < <({ grep -F -- "$temp_dir" <<< "$table"; grep -E -- "--address=[^ ]*:$port( |\$)" <<< "$table"; } || true)
  while ((${#queue[@]})); do
    pid="${queue[0]}"
    queue=("${queue[@]:1}")
    [[ " ${found[*]} " == *" $pid "* ]] && continue
    found+=("$pid")
    while read -r child; do
      [[ -n "$child" ]] && queue+=("$child")
    done < <(awk -v parent="$pid" '$2 == parent {print $1}' <<< "$table")
  done
  echo "${found[*]}"
}

# Whether PID runs (a zombie does not: it waits only for its parent to read its status).
ray_pid_alive() {
  local state
  state="$(ps -o stat= -p "$1" 2> /dev/null)" || return 1
  [[ -n "$state" && "$state" != Z* ]]
}

stop_ray_cluster() {
  local temp_dir="$1" port="${2:-}" grace="${3:-15}" pids left
  [[ "$temp_dir" == /* && ${#temp_dir} -gt 8 ]] || {
    echo "stop_ray_cluster: TEMP_DIR must be an absolute path of more than 8 characters, got '$temp_dir'" >&2
    return 2
  }
  [[ "$port" =~ ^[0-9]+$ ]] || { echo "stop_ray_cluster: PORT must be a port number, got '$port'" >&2; return 2; }
  pids="$(ray_cluster_pids "$temp_dir" "$port")"
  [[ -z "$pids" ]] && return 0
  # shellcheck disable=SC2086  # a list of PIDs
  kill -TERM $pids 2> /dev/null || true
  for _ in $(seq "$grace"); do
    left=""
    for pid in $pids; do ray_pid_alive "$pid" && left+=" $pid"; done
    [[ -z "$left" ]] && return 0
    sleep 1
  done
  # shellcheck disable=SC2086
  kill -KILL $left 2> /dev/null || true
}
