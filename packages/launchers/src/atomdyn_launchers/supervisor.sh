#!/bin/bash
# The job supervisor: the part of every job script that starts a role's processes and stops them together.
#
# sbatch.render inlines this file into each job script it writes, so that a job needs nothing of the package on
# its node. It writes the parts in their order, leaving out those a job does not need (containers, ports,
# one-shot), with the job's own lines between them: its #SBATCH header before everything, its exports and
# prelude after `supervise`, its `check_ports` after `ports` and its processes before `wait`.
#
#   #@ NAME     starts the part NAME (to the next #@ line). The parts named `example` are this file's alone:
#               a job of one process, so that the file runs and shellcheck sees each function used.
#   ## TEXT     a note of this file's, never inlined.
#   NAME=VALUE  a line assigning LOG_DIR, ROLE, STOP_GRACE_S or CONTAINERS gets the job's value.
#
# What a job does: it checks that the ports its processes will listen on are free on the node (another run or
# another user's service may hold one): a taken port fails the role at once, naming the port. Then it starts
# every process in the background and waits for the first one to exit. If that happens on its own (a crash),
# it writes which process it was and the last line of its log to <log dir>/<role>.failure (the launcher's
# headline), stops the rest and exits non-zero so Slurm records the failure at once. If the job is cancelled,
# it forwards SIGTERM to every process and waits until all have exited: otherwise slurmstepd kills them
# mid-shutdown and their etcd registrations outlive them. A process still running STOP_GRACE_S after SIGTERM
# (one blocked on a hung etcd, say) gets SIGKILL: a job honours SIGTERM within seconds. A one-shot job (a probe)
# has work that ends: its first process to exit with status 0 has done it, and the job stops the others and
# exits 0.
#
# A process that is a container's client (docker run) is not the container: killing the client leaves the
# container running, holding the GPUs, the ports and its etcd lease. So the containers are stopped by name
# (docker stop -t <grace>) with their clients, removed (docker rm -f) on every exit path of the script, and
# removed before anything starts when an earlier attempt left one of the same name.

#@ setup
set -u

LOG_DIR=/tmp/atomdyn-supervisor-example
ROLE=example
PIDS=()
NAMES=()
STOPPING=0
FAILING=0
STOP_GRACE_S=5
KILL_TIMER=''
FAILURE_FILE="$LOG_DIR/$ROLE.failure"

log() { echo "[$(date -u +%H:%M:%S.%3N)] $ROLE: $*"; }

# record_failure TEXT: one line saying why this role failed, for the launcher's headline.
record_failure() {
  printf '%s\n' "$1" >"$FAILURE_FILE.tmp" && mv -f "$FAILURE_FILE.tmp" "$FAILURE_FILE"
  log "FAILED: $1"
}

# shellcheck disable=SC2317  # called from the USR1 trap
kill_stragglers() {
  local i
  for i in "${!PIDS[@]}"; do
    if kill -0 "${PIDS[$i]}" 2>/dev/null; then
      log "${NAMES[$i]} still running ${STOP_GRACE_S} s after SIGTERM: SIGKILL"
      kill -KILL "${PIDS[$i]}" 2>/dev/null || true
    fi
  done
}
trap kill_stragglers USR1
#@ containers
## Only in a job whose processes are containers' clients; the word docker is written as the job's client
## (docker, podman: they take the same commands).

# This job's containers, by name: a container outlives its client (its PID 1 may ignore the TERM the
# client forwards), keeping the GPUs, the ports and its etcd lease. Stopped with the clients, removed on
# every exit path, and removed before anything starts when an earlier attempt left one.
CONTAINERS=(atomdyn-supervisor-example)
stop_containers() {
  local name
  for name in "${CONTAINERS[@]}"; do
    docker stop -t "$STOP_GRACE_S" "$name" >/dev/null 2>&1 &
  done
}
# shellcheck disable=SC2317  # also called from the EXIT trap
remove_containers() {
  local name
  [ "$BASHPID" = "$$" ] || return 0  # the grace timer, a subshell, runs this EXIT trap too
  for name in "${CONTAINERS[@]}"; do
    docker container inspect "$name" >/dev/null 2>&1 || continue
    if docker rm -f "$name" >/dev/null; then log "removed container $name"; fi
  done
}
trap remove_containers EXIT
#@ stop-all

stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
#@ stop-containers
  stop_containers
#@ supervise
  # A timer sends USR1 after the grace period; it is stopped (with its sleep) once all have exited.
  if [ -z "$KILL_TIMER" ] && [ "${#PIDS[@]}" -gt 0 ]; then
    # shellcheck disable=SC2016  # expanded by the timer's own shell
    (
      trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
      sleep "$STOP_GRACE_S" &
      sleeper=$!
      wait "$sleeper" && kill -USR1 $$
    ) &
    KILL_TIMER=$!
  fi
}

# shellcheck disable=SC2317  # called from the traps below
on_signal() {
  # Already failing (a process exited on its own): keep that status, the others are being stopped.
  if [ "$FAILING" = 1 ]; then log "$1 received while failing"; return 0; fi
  log "$1 received: stopping ${#PIDS[@]} processes"
  STOPPING=1
  stop_all
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# Processes of this job's process group that are neither this script nor its own helpers: what a
# process left behind when it exited (vLLM's engine core can outlive the worker that started it).
group_leftovers() {
  local pid info
  for pid in $(pgrep -g "$$"); do
    [ "$pid" = "$$" ] && continue
    info=$(ps -o ppid=,stat= -p "$pid" 2>/dev/null) || continue
    # shellcheck disable=SC2086  # split into ppid and stat
    set -- $info
    [ "$#" -eq 2 ] && [ "$1" != "$$" ] && [ "${2#Z}" = "$2" ] && echo "$pid"
  done
  return 0  # not the status of the last test: callers test the list, not the function
}

# Stop what the processes left behind: reparented away from this script, it would outlive the job and
# keep its memory (and its etcd lease alive). Only when this script leads its process group, as a
# Slurm batch step does: the group is then this job's alone.
sweep_group() {
  local left deadline
  [ "$(ps -o pgid= -p $$ | tr -d ' ')" = "$$" ] || return 0
  left=$(group_leftovers)
  [ -n "$left" ] || return 0
  # shellcheck disable=SC2086  # a list of pids
  log "processes left behind in the job's process group:" $left "(SIGTERM)"
  # shellcheck disable=SC2086
  kill -TERM $left 2>/dev/null || true
  deadline=$((SECONDS + STOP_GRACE_S))
  while left=$(group_leftovers) && [ -n "$left" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.2  # polling for their exit, up to the grace period
  done
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086
    log "still running ${STOP_GRACE_S} s after SIGTERM:" $left "(SIGKILL)"
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
  fi
}

# start NAME COMMAND...: run in the background, output to LOG_DIR/ROLE.NAME.log
start() {
  local name=$1
  shift
  if [ "$STOPPING" = 1 ]; then return 0; fi
  "$@" >"$LOG_DIR/$ROLE.$name.log" 2>&1 &
  PIDS+=("$!")
  NAMES+=("$name")
  log "started $name (pid $!)"
}

log "job ${SLURM_JOB_ID:-?} on $(hostname)"
mkdir -p "$LOG_DIR"
#@ example
## Here a job exports its environment and runs its prelude (probes; they may set variables its processes use).
export EXAMPLE_DURATION_S=2
#@ remove-containers
## Only in a job with containers.

remove_containers  # an earlier attempt's, before the ports are checked
#@ ports
## Only in a job whose processes listen on ports; the job's `check_ports NAME=PORT...` follows.

# port_in_use PORT: a TCP socket listens on PORT in this node's network namespace (any address).
port_in_use() {
  local files=() f
  for f in /proc/net/tcp /proc/net/tcp6; do if [ -r "$f" ]; then files+=("$f"); fi; done
  awk -v port="$(printf '%04X' "$1")" '$4 == "0A" { split($2, a, ":"); if (a[2] == port) found = 1 }
    END { exit !found }' "${files[@]}"
}

# check_ports NAME=PORT...: fail the role, naming every taken port, before anything starts.
check_ports() {
  local spec taken=''
  for spec in "$@"; do
    if port_in_use "${spec#*=}"; then taken="$taken, port ${spec#*=} (${spec%%=*})"; fi
  done
  if [ -n "$taken" ]; then
    record_failure "${taken#, } already in use on $(hostname): another run or service holds it"
    exit 98
  fi
}

# Ports this job listens on must be free here (another run or service may hold one).
#@ example
check_ports example=18098
## Here a job starts its processes, each with `start NAME COMMAND...`.

start worker sleep "$EXAMPLE_DURATION_S"
#@ wait

# Wait for the first process to exit, or for a signal.
first_pid=''
wait -n -p first_pid
first_status=$?
failed=''
first=''
for i in "${!PIDS[@]}"; do
  if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then failed="$failed ${NAMES[$i]}"; fi
  if [ "${PIDS[$i]}" = "${first_pid:-}" ]; then first=${NAMES[$i]}; fi
done
#@ one-shot
# A one-shot job: the first process to exit with 0 did the job's work.
if [ "$STOPPING" = 0 ] && [ "$first_status" = 0 ]; then
  log "${first:-?} finished its work: stopping the others"
  STOPPING=1
  stop_all
fi
#@ finish
if [ "$STOPPING" = 0 ]; then
  FAILING=1
  log "process(es)${failed} exited (status $first_status) on their own: stopping the others"
  how="status $first_status"
  last=''
  if [ "$first_status" -gt 128 ]; then
    how="$how, signal $(kill -l "$((first_status - 128))")"
  else  # its own exit: the last line of its log says why (colour codes removed)
    last=$(tail -n 1 "$LOG_DIR/$ROLE.${first:-?}.log" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-300)
  fi
  record_failure "process ${first:-?} exited first, on its own ($how)${last:+: $last}"
  stop_all
fi

# Reap every process; a signal (a second SIGTERM, the grace timer's USR1) interrupts wait: loop.
for pid in "${PIDS[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" 2>/dev/null || true; done
done
if [ -n "$KILL_TIMER" ]; then kill "$KILL_TIMER" 2>/dev/null || true; fi
sweep_group
if [ "$STOPPING" = 1 ]; then
  log "all processes stopped"
  exit 0
fi
if [ "$first_status" = 0 ]; then first_status=1; fi
log "failed: exit $first_status"
exit "$first_status"
