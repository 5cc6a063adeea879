# Process handling shared by the local service scripts (aws-emulators.sh, schema-registry.sh):
# sourced, not run. The sourcing script sets `state` (its folder under .local/), `HOST`,
# `stop_timeout` (seconds from TERM to KILL) and defines `say`, `die` and `marker NAME` (a string
# of NAME's command line, so that a recycled pid is never taken for ours). NAME's pid and port are
# kept in $state/NAME.pid and $state/NAME.port.

# A process that has exited but is not reaped yet (a zombie, e.g. under a PID 1 that reaps slowly)
# is not alive.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [ "$st" != Z ]
}

# Prints the pid of NAME when it is ours and alive; fails otherwise.
running_pid() {
  local name="$1" pid
  [ -f "$state/$name.pid" ] || return 1
  pid="$(cat "$state/$name.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$(marker "$name")" || return 1
  echo "$pid"
}

# NAME's port while it runs, DEFAULT otherwise.
recorded_port() {
  local name="$1" default="$2"
  if running_pid "$name" >/dev/null && [ -s "$state/$name.port" ]; then cat "$state/$name.port"; else echo "$default"; fi
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Stops NAME: TERM, then KILL after $stop_timeout seconds; forgets its pid and port.
stop_one() {
  local name="$1" pid
  if ! pid="$(running_pid "$name")"; then
    rm -f "$state/$name.pid" "$state/$name.port"
    say "$name not running"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + stop_timeout))
  while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if alive "$pid"; then
    say "$name (pid $pid) still running ${stop_timeout}s after TERM; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  fi
  rm -f "$state/$name.pid" "$state/$name.port"
  say "$name stopped (pid $pid)"
}

# One start/stop at a time per checkout (two test runs starting together must not race); waits up
# to SECONDS for the other.
lock() {
  local seconds="$1"
  mkdir -p "$state"
  if command -v flock >/dev/null; then
    exec 9>"$state/lock"
    flock -w "$seconds" 9 || die "another $(basename "$0") holds $state/lock"
  fi
}
