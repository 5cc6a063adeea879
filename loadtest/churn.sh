#!/usr/bin/env bash
# Fleet-change benchmark (issue 33): what a deploy, a scale-out and a crash cost a fleet of real
# `floe run` workers in records read again and in delay. Per scenario: a fresh floe-mock-kafka
# topic (48 partitions), a SQLite lease store, a local warehouse; floe-loadgen produces at a steady
# rate while the fleet changes; then the pipeline drains, the workers stop (SIGTERM) and
# loadtest/verify.py checks exactly-once. loadtest/churn_report.py prints, per scenario: records
# produced; records read by all workers (the sum of floe_records_read_total scraped from every
# worker process just before it stops, and at the end); read amplification (read / produced);
# records read again (floe_records_reread_total, "n/a" when the workers do not export it);
# floe_data_freshness_seconds max and p95 (every worker scraped every second; the fleet's value is
# the max over workers); record delay max and p95 (commit time of the snapshot that added the
# record's data file − the record's produce time, from PyIceberg; loadgen paces records, so record
# i of a run is produced at its start + i / rate).
#
#   loadtest/churn.sh [--quick] [--records N] [--rate R] [--scenarios LIST] [--partitions P]
#                     [--freshness S] [--dir DIR] [--release] [--keep]
#
# Scenarios (comma-separated, default all, in this order):
#   steady    4 workers throughout
#   rolling   4 workers; each in turn SIGTERMed (drained) and started again, twice over: 8 steps
#   scaleout  2 workers, 2 more at 20% of production, 2 more at 40% (6), 3 of them SIGTERMed at 65%
#   kill      4 workers; one SIGKILLed at 35% of production and started again 30 s later
#
# Defaults: 720,000 records at 3,000 records/s (240 s of production per scenario), 48 partitions,
# data_freshness 30 s, default lease settings (lease_duration 10 s). --quick: 36,000 records at
# 600/s (60 s). Binaries: as chaos.sh ($FLOE_BIN ... else $CARGO_TARGET_DIR/debug, --release:
# .../release); the profile is printed with the results. Everything started is killed on exit;
# the directory is removed unless --keep or a scenario failed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

quick=0 records="" rate="" scenarios="steady,rolling,scaleout,kill" partitions=48 freshness=30
dir="" profile=debug keep=0 drain_timeout=300
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --records) records="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --scenarios) scenarios="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --freshness) freshness="$2"; shift 2 ;;
    --drain-timeout) drain_timeout="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --release) profile=release; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "churn: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$quick" = 1 ]; then records="${records:-36000}" rate="${rate:-600}"
else records="${records:-720000}" rate="${rate:-3000}"; fi
production_s=$(( records / rate ))

# shellcheck source=loadtest/lib.sh
. "$root/loadtest/lib.sh"
lt_binaries churn "$profile"

lt_workdir churn "$dir"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- processes we start, cleaned up on exit ---------------------------------------------------
declare -A wpid=() wport=() wruns=()
workers=(w1 w2 w3 w4 w5 w6)
broker_pid="" loadgen_pid="" scraper_pid="" failed=0
kill_all() {
  local p w
  for w in "${workers[@]}"; do
    p="${wpid[$w]:-}"; [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
    wpid[$w]=""
  done
  for p in "$loadgen_pid" "$scraper_pid" "$broker_pid"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
  done
  loadgen_pid="" scraper_pid="" broker_pid=""
  wait 2>/dev/null || true
}
cleanup() {
  kill_all
  if [ "$keep" = 0 ] && [ "$failed" = 0 ]; then rm -rf "$dir"; else echo "churn: kept $dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Metrics ports: six free ones from a random base.
free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
for w in "${workers[@]}"; do wport[$w]=$(free_port); done

config_of() { # worker scenario-dir
  cat <<EOF
[worker]
id = "$1"
shutdown_timeout = "30s"
metrics_address = "127.0.0.1:${wport[$1]}"

[lease_store]
kind = "sqlite"
path = "$2/leases.sqlite"

[[channel]]
name = "churn"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "$bootstrap"
  topic = "events"
  initial_position = "earliest"
  [channel.schema]
  file = "$root/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "churn"
  table = "events"
  partition_field = "event_time"
  data_freshness = "${freshness}s"
    # No compaction or snapshot expiry: the report maps every data file to the snapshot that
    # added it.
    [channel.destination.maintenance]
    enabled = false
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "$2/catalog.sqlite"
    warehouse = "$2/warehouse"
  [channel.dlq]
  kind = "local"
  path = "$2/dlq"
EOF
}

# ---- workers: every stop is preceded by a scrape of the process's final counters ----------------
start_worker() {
  local w="$1"
  wruns[$w]=$(( ${wruns[$w]:-0} + 1 ))
  RUST_LOG="info" "$floe" run --config "$sdir/$w.toml" >>"$sdir/$w.log" 2>&1 &
  wpid[$w]=$!
}
scrape_final() { # the counters of worker $1's current process, as it is about to stop
  curl -s --max-time 2 "http://127.0.0.1:${wport[$1]}/metrics" >"$sdir/final-$1-${wruns[$1]}.prom" || true
}
stop_workers() { # TERM|KILL worker...: signals them all, then waits for each exit (SIGTERM: at
  # most 45 s, then SIGKILL)
  local sig="$1" w p t rc; shift
  for w in "$@"; do scrape_final "$w"; kill "-$sig" "${wpid[$w]}" 2>/dev/null || true; done
  t=$SECONDS
  for w in "$@"; do
    p="${wpid[$w]}" rc=0
    while kill -0 "$p" 2>/dev/null && [ $((SECONDS - t)) -lt 45 ]; do sleep 0.2; done
    if kill -0 "$p" 2>/dev/null; then
      say "warning: $w still running 45 s after SIGTERM: SIGKILL"; kill -KILL "$p"; failed=1
    fi
    wait "$p" 2>/dev/null || rc=$?
    wpid[$w]=""
    if [ "$sig" = TERM ] && [ "$rc" != 0 ]; then say "warning: $w exited $rc on SIGTERM"; failed=1; fi
    say "$w stopped (SIG$sig, exit $rc, $((SECONDS - t)) s)"
  done
}
running() { local w; for w in "${workers[@]}"; do [ -n "${wpid[$w]:-}" ] && echo "$w"; done; }
at() { # wait until $1 s after production started
  local until=$(( lg_start_s + $1 ))
  while [ "$SECONDS" -lt "$until" ]; do sleep 0.5; done
}

# ---- one scenario -------------------------------------------------------------------------------
run_scenario() {
  local name="$1" w i step
  sdir="$dir/$name"; mkdir -p "$sdir"
  wruns=()
  lt_start_mock_kafka "$sdir/broker.log" events "$partitions"
  for w in "${workers[@]}"; do config_of "$w" "$sdir" >"$sdir/$w.toml"; done
  "$floe" validate --config "$sdir/w1.toml" >/dev/null
  echo "load_start $(loadavg)" >"$sdir/load.txt"
  local initial=4; [ "$name" = scaleout ] && initial=2
  for w in "${workers[@]:0:$initial}"; do start_worker "$w"; done
  # The scraper: every worker's freshness and counters, every second, until killed.
  "$py" "$root/loadtest/churn_report.py" scrape --out "$sdir/samples.jsonl" \
    $(for w in "${workers[@]}"; do printf -- '--worker %s=%s ' "$w" "${wport[$w]}"; done) &
  scraper_pid=$!
  sleep 3
  say "$name: $initial workers, producing $records records at $rate/s into $partitions partitions"
  date +%s.%N >"$sdir/loadgen.start"
  lg_start_s=$SECONDS
  "$loadgen" kafka --bootstrap "$bootstrap" --topic events --records "$records" --rate "$rate" \
    --seed 7 --spread-hours 0 --bad-share 0 --manifest "$sdir/manifest.jsonl" --progress-s 60 \
    >"$sdir/loadgen.out" 2>"$sdir/loadgen.log" &
  loadgen_pid=$!

  case "$name" in
    steady) ;;
    rolling)
      step=$(( production_s * 75 / 100 / 8 ))
      for i in 0 1 2 3 4 5 6 7; do
        at $(( production_s / 10 + i * step ))
        w="${workers[$(( i % 4 ))]}"
        say "rolling restart step $((i + 1))/8: $w"
        stop_workers TERM "$w"
        start_worker "$w"
      done ;;
    scaleout)
      at $(( production_s * 20 / 100 )); start_worker w3; start_worker w4; say "scale-out: 4 workers"
      at $(( production_s * 40 / 100 )); start_worker w5; start_worker w6; say "scale-out: 6 workers"
      at $(( production_s * 65 / 100 )); say "scale-in: stopping w4, w5, w6"
      stop_workers TERM w4 w5 w6 ;;
    kill)
      at $(( production_s * 35 / 100 )); say "SIGKILL w2"; stop_workers KILL w2
      sleep 30; start_worker w2; say "w2 started again" ;;
  esac

  local lg_rc=0; wait "$loadgen_pid" || lg_rc=$?; loadgen_pid=""
  say "$name: floe-loadgen done: $(cat "$sdir/loadgen.out")"
  [ "$lg_rc" = 0 ] || { say "warning: floe-loadgen exited $lg_rc"; failed=1; }
  local verify=("$py" "$root/loadtest/verify.py" --manifest "$sdir/manifest.jsonl"
    --catalog "$sdir/catalog.sqlite" --warehouse "$sdir/warehouse" --table churn.events
    --dlq "$sdir/dlq" --channel churn)
  "${verify[@]}" --wait-seconds "$drain_timeout" >/dev/null 2>"$sdir/drain.log" || true
  say "$name: drained ($(tail -1 "$sdir/drain.log"))"
  echo "load_end $(loadavg)" >>"$sdir/load.txt"
  kill "$scraper_pid" 2>/dev/null || true; wait "$scraper_pid" 2>/dev/null || true; scraper_pid=""
  # shellcheck disable=SC2046
  stop_workers TERM $(running)
  local vrc=0
  "${verify[@]}" >"$sdir/verify.out" 2>&1 || vrc=$?
  [ "$vrc" = 0 ] || { failed=1; cat "$sdir/verify.out"; }
  echo "verify_rc $vrc" >>"$sdir/load.txt"
  kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; broker_pid=""
}

say "workers: $profile build ($floe); $records records at $rate/s ($production_s s) per scenario; load average $(loadavg)"
IFS=',' read -r -a todo <<<"$scenarios"
for s in "${todo[@]}"; do
  case "$s" in steady|rolling|scaleout|kill) ;; *) echo "churn: unknown scenario $s" >&2; exit 2 ;; esac
  run_scenario "$s"
done
# A worker exports floe_records_reread_total once it has counted: none scraped is 0 when the
# binary has the counter (issue 33), n/a when it does not.
reread_known=(); grep -aq floe_records_reread_total "$floe" && reread_known=(--reread-known)
"$py" "$root/loadtest/churn_report.py" report --dir "$dir" --profile "$profile" \
  --rate "$rate" --freshness "$freshness" "${reread_known[@]}" "${todo[@]}"
[ "$failed" = 0 ] && echo "churn: PASS" || { echo "churn: FAIL (logs in $dir)"; exit 1; }
