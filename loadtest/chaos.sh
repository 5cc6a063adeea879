#!/usr/bin/env bash
# Chaos run: 3 `floe run` workers deliver while floe-loadgen produces; for a fixed duration random
# workers are SIGKILLed, SIGSTOPped past lease expiry then SIGCONTed, and gracefully restarted —
# including the committer-lease holder (read from the lease store with `floe channel describe`);
# on Kinesis one shard is split and two are merged. Then every worker runs again, the pipeline
# drains, the workers stop (SIGTERM) and loadtest/verify.py reconciles table + DLQ with the
# manifest: zero missing, zero duplicated, DLQ codes as produced, rows in their hour partition.
#
#   loadtest/chaos.sh [--source kafka|kinesis] [--quick] [--duration S] [--records N]
#                     [--warehouse local|s3] [--seed N] [--dir DIR] [--release] [--keep]
#                     [--read-mode polling|enhanced_fan_out]
#                     [--cdc [--format-version 2|3]]    (also: --scenario cdc)
#
#   kafka:   floe-mock-kafka (8 partitions, more above ~160,000 records) + SQLite lease store + local warehouse and DLQ
#   kinesis: the local emulators' moto (Kinesis 4 shards, DynamoDB leases; warehouse and DLQ local
#            or, with --warehouse s3, in S3 buckets); needs `deploy/local/aws-emulators.sh start`
#            (started here if not running) and the .venv (boto3, PyIceberg);
#            --read-mode enhanced_fan_out: the stream on the emulators' kinesalite, read with
#            SubscribeToShard through the EFO emulator in front of it (HTTPS, its CA as aws.ca_bundle)
#
# Defaults: 240 s of faults, 200,000 records (one fault every ~9 s: >= 20 faults). --quick: 50 s,
# 15,000 records (~7 faults), under 5 minutes with the drain. Bounded: the drain waits at most
# --drain-timeout (default 240 s; 120 s with --quick); everything started is killed on exit.
# Binaries: $FLOE_BIN, $FLOE_LOADGEN_BIN, $FLOE_MOCK_KAFKA_BIN, else $CARGO_TARGET_DIR/{debug,release}.
# Prints each fault, verify's check lines, and last `chaos: <source> records R, faults F, ...`;
# exit status 0 only when verify passes (and every worker exited 0 on SIGTERM).
#
# --cdc (Kafka only): change data capture under the same faults. floe-loadgen --changes produces
# Debezium change events of a `customers` table (a snapshot of records/10 keys, then `records`
# change events: 70% updates, 10% deletes with their tombstones, 20% inserts) into a channel with
# envelope = "debezium", mode = "upsert", key = ["id"] (format_version 2, or 3: deletion
# vectors), unpartitioned; then loadtest/verify_cdc.py checks the table against the final state:
# no key twice, no deleted row alive, every live key with its last values (PyIceberg and DuckDB),
# no equality-delete file, at most one delete file per data file, and an empty DLQ.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

source_kind=kafka quick=0 duration="" records="" warehouse=local seed=1 dir="" profile=debug keep=0
drain_timeout="" read_mode=polling cdc=0 format_version=2
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_kind="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --duration) duration="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --warehouse) warehouse="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --release) profile=release; shift ;;
    --keep) keep=1; shift ;;
    --read-mode) read_mode="$2"; shift 2 ;;
    --drain-timeout) drain_timeout="$2"; shift 2 ;;
    --cdc) cdc=1; shift ;;
    --scenario) case "$2" in cdc) cdc=1 ;; append) cdc=0 ;; *) echo "chaos: --scenario cdc|append" >&2; exit 2 ;; esac; shift 2 ;;
    --format-version) format_version="$2"; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "chaos: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$source_kind" in kafka|kinesis) ;; *) echo "chaos: --source kafka|kinesis" >&2; exit 2 ;; esac
case "$warehouse" in local|s3) ;; *) echo "chaos: --warehouse local|s3" >&2; exit 2 ;; esac
case "$read_mode" in polling|enhanced_fan_out) ;; *) echo "chaos: --read-mode polling|enhanced_fan_out" >&2; exit 2 ;; esac
[ "$read_mode" = polling ] || [ "$source_kind" = kinesis ] || { echo "chaos: --read-mode enhanced_fan_out needs --source kinesis" >&2; exit 2; }
[ "$cdc" = 0 ] || [ "$source_kind" = kafka ] || { echo "chaos: --cdc needs --source kafka (floe-loadgen --changes produces to Kafka)" >&2; exit 2; }
case "$format_version" in 2|3) ;; *) echo "chaos: --format-version 2|3" >&2; exit 2 ;; esac
if [ "$quick" = 1 ]; then
  duration="${duration:-50}" records="${records:-15000}" drain_timeout="${drain_timeout:-120}"
else
  duration="${duration:-240}" records="${records:-200000}" drain_timeout="${drain_timeout:-240}"
fi
lease_s=4                          # lease_duration; a SIGSTOP lasts lease_s + 2 s
fault_every=$(( duration / 26 )); [ "$fault_every" -ge 3 ] || fault_every=3   # plus each fault's own time
cdc_keys=$(( records / 10 ))       # --cdc: the snapshot's keys, produced before the change events
events=$records; [ "$cdc" = 0 ] || events=$(( records + cdc_keys ))
rate=$(( events * 10 / (duration * 9) + 1 ))   # production ends at ~90% of the fault window
RANDOM=$seed

# shellcheck source=loadtest/lib.sh
. "$root/loadtest/lib.sh"
lt_binaries chaos "$profile"

lt_workdir chaos "$dir"

# ---- processes we start, cleaned up on exit -----------------------------------------------------
declare -A wpid=() wstate=()   # worker id -> pid; running|stopped|dead
workers=(w1 w2 w3)
broker_pid="" loadgen_pid=""
cleanup() {
  local p
  for w in "${workers[@]}"; do
    p="${wpid[$w]:-}"
    [ -n "$p" ] || continue
    kill -CONT "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in "$loadgen_pid" "$broker_pid"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "$keep" = 0 ] && [ "${chaos_ok:-0}" = 1 ]; then rm -rf "$dir"; else echo "chaos: kept $dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- source and configuration ---------------------------------------------------------------------
# The emulators' endpoint: FLOE_TEST_AWS_ENDPOINT when set (scripts/test.sh exports it), else
# deploy/local/aws-emulators.sh starts them (if needed) and gives it.
aws_env() {
  if [ -z "${FLOE_TEST_AWS_ENDPOINT:-}" ]; then
    "$root/deploy/local/aws-emulators.sh" status >/dev/null 2>&1 || "$root/deploy/local/aws-emulators.sh" start >&2
    eval "$("$root/deploy/local/aws-emulators.sh" env)"
  fi
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
  export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_EC2_METADATA_DISABLED=true
  endpoint="$FLOE_TEST_AWS_ENDPOINT"
  # The stream's emulator: moto, or for enhanced fan-out the kinesalite behind the EFO emulator.
  kinesis_endpoint="$endpoint"
  [ "$read_mode" = polling ] || kinesis_endpoint="$FLOE_TEST_KINESALITE_ENDPOINT"
}
channel=chaos
uniq="$(date +%s)-$$"
aws_block="" lease_block="" source_block="" wh="$dir/warehouse" dlq_block=""
if [ "$source_kind" = kafka ]; then
  # The mock broker keeps 5 MiB per partition (bin/floe-mock-kafka.rs): at most ~4 MiB each
  # (records are ~190 B), so no record is deleted before the workers read it.
  # (--cdc: change events are ~500 B, plus a tombstone per delete.)
  record_bytes=200; [ "$cdc" = 0 ] || record_bytes=560
  partitions=$(( (events * record_bytes + 4194303) / 4194304 ))
  [ "$partitions" -ge 8 ] || partitions=8
  lt_start_mock_kafka "$dir/broker.log" events "$partitions"
  say "floe-mock-kafka at $bootstrap (topic events, $partitions partitions)"
  lease_block="kind = \"sqlite\"
path = \"$dir/leases.sqlite\""
  source_block="kind = \"kafka\"
  bootstrap_servers = \"$bootstrap\"
  topic = \"events\"
  initial_position = \"earliest\""
else
  aws_env
  stream="chaos-$uniq"
  lease_table="floe-chaos-$uniq"
  "$py" - "$kinesis_endpoint" "$stream" <<'PY'
import sys, time, boto3
endpoint, stream = sys.argv[1:]
k = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
k.create_stream(StreamName=stream, ShardCount=4)
while k.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
    time.sleep(0.2)
PY
  say "Kinesis stream $stream (4 shards) on $kinesis_endpoint, DynamoDB lease table $lease_table on $endpoint, read with $read_mode"
  aws_block="[aws]
region = \"us-east-1\"
endpoint_url = \"$endpoint\"
"
  lease_block="kind = \"dynamodb\"
table = \"$lease_table\""
  if [ "$read_mode" = polling ]; then
    source_block="kind = \"kinesis\"
  stream_name = \"$stream\"
  initial_position = \"trim_horizon\"
  max_records_per_call = 10000
  poll_interval = \"200ms\""
  else
    aws_block="[aws]
region = \"us-east-1\"
endpoint_url = \"$endpoint\"
ca_bundle = \"$FLOE_TEST_KINESIS_EFO_CA\"
[aws.endpoints]
kinesis = \"$FLOE_TEST_KINESIS_EFO_ENDPOINT\"
"
    source_block="kind = \"kinesis\"
  stream_name = \"$stream\"
  initial_position = \"trim_horizon\"
  read_mode = \"enhanced_fan_out\""
  fi
fi
dlq_location="$dir/dlq"
dlq_block="kind = \"local\"
  path = \"$dir/dlq\""
if [ "$warehouse" = s3 ]; then
  [ "$source_kind" = kinesis ] || { aws_env; aws_block="[aws]
region = \"us-east-1\"
endpoint_url = \"$endpoint\"
"; }
  whb="chaos-wh-$uniq" dlqb="chaos-dlq-$uniq"
  "$py" - "$endpoint" "$whb" "$dlqb" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
for b in sys.argv[2:]:
    s3.create_bucket(Bucket=b)
PY
  wh="s3://$whb/floe"
  dlq_location="s3://$dlqb/dlq/"
  dlq_block="kind = \"s3\"
  bucket = \"$dlqb\"
  prefix = \"dlq/\""
  say "S3 warehouse $wh, DLQ $dlq_location"
fi

# The table: Event records appended, hour-partitioned; or (--cdc) the customers table upserted.
if [ "$cdc" = 0 ]; then
  table_block="[channel.schema]
  file = \"$root/config/event.schema.json\"
  [channel.destination]
  kind = \"iceberg\"
  namespace = \"chaos\"
  table = \"events\"
  partition_field = \"event_time\"
  data_freshness = \"10s\"
    # Table maintenance under the same faults as delivery: snapshot expiry in the commits,
    # compaction of closed hours and the other rewrites every 30 s.
    [channel.destination.maintenance]
    snapshot_retention = \"1m\"
    min_snapshots = 5
    compaction_delay = \"0s\"
    interval = \"30s\""
else
  table_block="[channel.record]
  format = \"json\"
  envelope = \"debezium\"
  [channel.schema]
  file = \"$root/loadtest/cdc_row.schema.json\"
  [channel.destination]
  kind = \"iceberg\"
  namespace = \"chaos\"
  table = \"customers\"
  partition = []
  mode = \"upsert\"
  key = [\"id\"]
  format_version = $format_version
  data_freshness = \"10s\"
    # Snapshot expiry and the maintenance rewrites under the same faults as delivery.
    [channel.destination.maintenance]
    snapshot_retention = \"1m\"
    min_snapshots = 5
    interval = \"30s\""
fi
config_of() {
  cat <<EOF
[worker]
id = "$1"
shutdown_timeout = "30s"
metrics_address = "off"
$aws_block
[lease_store]
$lease_block
lease_duration = "${lease_s}s"
renew_interval = "1s"

[[channel]]
name = "$channel"
  [channel.source]
  $source_block
  $table_block
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "$dir/catalog.sqlite"
    warehouse = "$wh"
  [channel.dlq]
  $dlq_block
EOF
}
for w in "${workers[@]}"; do config_of "$w" >"$dir/$w.toml"; done
"$floe" validate --config "$dir/w1.toml" >/dev/null

# ---- workers --------------------------------------------------------------------------------------
start_worker() {
  local w="$1"
  RUST_LOG="info,aws_config=warn,aws_smithy_runtime=warn" "$floe" run --config "$dir/$w.toml" \
    >>"$dir/$w.log" 2>&1 &
  wpid[$w]=$!
  wstate[$w]=running
}
committer() {
  "$floe" channel describe --config "$dir/w1.toml" --json "$channel" 2>/dev/null |
    "$py" -c 'import json,sys; d=json.load(sys.stdin); print(d[0].get("committer") or "")' 2>/dev/null || true
}
pick() { # a random worker in state $1
  local c=() w
  for w in "${workers[@]}"; do [ "${wstate[$w]}" = "$1" ] && c+=("$w"); done
  [ ${#c[@]} -gt 0 ] && echo "${c[RANDOM % ${#c[@]}]}"
}
for w in "${workers[@]}"; do start_worker "$w"; sleep 0.3; done
what="$records records"; [ "$cdc" = 0 ] || what="$events change events ($cdc_keys keys in the snapshot, format v$format_version)"
say "3 workers running (lease ${lease_s}s, freshness 10s); producing $what at ~$rate/s; faults every ~${fault_every}s for ${duration}s"

manifest="$dir/manifest.jsonl"
if [ "$cdc" = 1 ]; then
  "$loadgen" kafka --bootstrap "$bootstrap" --topic events --changes --keys "$cdc_keys" --records "$records" \
    --updates 0.7 --deletes 0.1 --rate "$rate" --seed "$seed" --manifest "$manifest" --progress-s 30 \
    >"$dir/loadgen.out" 2>"$dir/loadgen.log" &
elif [ "$source_kind" = kafka ]; then
  "$loadgen" kafka --bootstrap "$bootstrap" --topic events --records "$records" --rate "$rate" \
    --seed "$seed" --spread-hours 3 --bad-share 0.01 --manifest "$manifest" --progress-s 30 \
    >"$dir/loadgen.out" 2>"$dir/loadgen.log" &
else
  "$loadgen" kinesis --stream "$stream" --endpoint-url "$kinesis_endpoint" --region us-east-1 \
    --records "$records" --rate "$rate" --seed "$seed" --spread-hours 3 --bad-share 0.01 \
    --manifest "$manifest" --progress-s 30 >"$dir/loadgen.out" 2>"$dir/loadgen.log" &
fi
loadgen_pid=$!

# ---- faults -------------------------------------------------------------------------------------
faults=0
declare -A fault_counts=()
fault() { faults=$((faults + 1)); fault_counts[$1]=$(( ${fault_counts[$1]:-0} + 1 )); say "fault $faults: $1 $2"; }
sigkill() { kill -KILL "${wpid[$1]}" 2>/dev/null || true; wait "${wpid[$1]}" 2>/dev/null || true; wstate[$1]=dead; }
pause_past_expiry() {
  kill -STOP "${wpid[$1]}" 2>/dev/null || return 0; wstate[$1]=stopped
  sleep $((lease_s + 2))
  kill -CONT "${wpid[$1]}" 2>/dev/null || true; wstate[$1]=running
}
unexpected_exits=0
reap() { # a running worker that exited by itself is reported and restarted like a killed one
  local w rc
  for w in "${workers[@]}"; do
    if [ "${wstate[$w]}" = running ] && ! kill -0 "${wpid[$w]}" 2>/dev/null; then
      rc=0; wait "${wpid[$w]}" || rc=$?
      say "warning: $w exited by itself with status $rc (log $dir/$w.log)"
      unexpected_exits=$((unexpected_exits + 1)); wstate[$w]=dead
    fi
  done
}
reshard() { # split | merge, with boto3 (no aws CLI needed)
  "$py" - "$kinesis_endpoint" "$stream" "$1" <<'PY'
import sys, boto3, time
endpoint, stream, op = sys.argv[1:]
k = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
def wait():
    while k.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        time.sleep(0.2)
shards = [s for s in k.list_shards(StreamName=stream)["Shards"] if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
shards.sort(key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
if op == "split":
    s = shards[0]
    lo, hi = int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"])
    k.split_shard(StreamName=stream, ShardToSplit=s["ShardId"], NewStartingHashKey=str((lo + hi) // 2 + 1))
    print(f"split {s['ShardId']}")
else:
    a, b = shards[-2], shards[-1]
    k.merge_shards(StreamName=stream, ShardToMerge=a["ShardId"], AdjacentShardToMerge=b["ShardId"])
    print(f"merged {a['ShardId']} + {b['ShardId']}")
wait()
PY
}

split_at=$(( duration / 3 )) merge_at=$(( 2 * duration / 3 )) split_done=0 merge_done=0
end=$(( SECONDS + duration ))
while [ "$SECONDS" -lt "$end" ]; do
  sleep $(( 1 + RANDOM % (fault_every / 2 + 1) ))
  [ "$SECONDS" -lt "$end" ] || break
  reap
  # dead workers come back first (a restart after a kill), and get 2 s to start up
  restarted=0
  while w=$(pick dead); do start_worker "$w"; say "restarted $w"; restarted=1; done
  [ "$restarted" = 0 ] || sleep 2
  elapsed=$(( SECONDS - t0 ))
  if [ "$source_kind" = kinesis ] && [ "$split_done" = 0 ] && [ "$elapsed" -ge "$split_at" ]; then
    fault reshard "$(reshard split)"; split_done=1; continue
  fi
  if [ "$source_kind" = kinesis ] && [ "$merge_done" = 0 ] && [ "$elapsed" -ge "$merge_at" ]; then
    fault reshard "$(reshard merge)"; merge_done=1; continue
  fi
  case $(( RANDOM % 6 )) in
    0|1) w=$(pick running) || continue; fault sigkill "$w"; sigkill "$w"; sleep 1 ;;
    2) c=$(committer)
       if [ -n "$c" ] && [ "${wstate[$c]:-}" = running ]; then fault sigkill-committer "$c"; sigkill "$c"; sleep 1
       else w=$(pick running) || continue; fault sigkill "$w (committer unknown: '$c')"; sigkill "$w"; sleep 1; fi ;;
    3) w=$(pick running) || continue; fault sigstop "$w for $((lease_s + 2))s"; pause_past_expiry "$w" ;;
    4) c=$(committer)
       if [ -n "$c" ] && [ "${wstate[$c]:-}" = running ]; then fault sigstop-committer "$c for $((lease_s + 2))s"; pause_past_expiry "$c"
       else w=$(pick running) || continue; fault sigstop "$w for $((lease_s + 2))s"; pause_past_expiry "$w"; fi ;;
    5) w=$(pick running) || continue; fault restart "$w (SIGTERM, drain, start)"
       kill -TERM "${wpid[$w]}" 2>/dev/null || true; rc=0; wait "${wpid[$w]}" || rc=$?
       [ "$rc" = 0 ] || say "warning: $w exited $rc on SIGTERM"
       start_worker "$w" ;;
  esac
done
reap
for w in "${workers[@]}"; do [ "${wstate[$w]}" = dead ] && { start_worker "$w"; say "restarted $w"; }; done
if [ "$source_kind" = kinesis ]; then
  [ "$split_done" = 1 ] || { fault reshard "$(reshard split)"; }
  [ "$merge_done" = 1 ] || { fault reshard "$(reshard merge)"; }
fi
say "faults over: $faults injected; waiting for floe-loadgen"
lg_rc=0; wait "$loadgen_pid" || lg_rc=$?; loadgen_pid=""
say "floe-loadgen: $(cat "$dir/loadgen.out")"
[ "$lg_rc" = 0 ] || say "warning: floe-loadgen exited $lg_rc"

# ---- drain, stop, verify ------------------------------------------------------------------------
if [ "$cdc" = 0 ]; then
  verify=("$py" "$root/loadtest/verify.py" --manifest "$manifest" --catalog "$dir/catalog.sqlite"
    --warehouse "$wh" --table chaos.events --dlq "$dlq_location" --channel "$channel")
else
  verify=("$py" "$root/loadtest/verify_cdc.py" --manifest "$manifest" --catalog "$dir/catalog.sqlite"
    --warehouse "$wh" --table chaos.customers --dlq "$dlq_location" --channel "$channel")
fi
[ -z "${endpoint:-}" ] || verify+=(--s3-endpoint "$endpoint")
say "draining (at most ${drain_timeout}s)"
"${verify[@]}" --wait-seconds "$drain_timeout" >/dev/null 2>"$dir/drain.log" || true
tail -1 "$dir/drain.log" | sed 's/^/chaos: /'
stop_rc=0
for w in "${workers[@]}"; do kill -TERM "${wpid[$w]}" 2>/dev/null || true; done
stop_t=$SECONDS
for w in "${workers[@]}"; do
  # bounded: shutdown_timeout (30 s) + 15 s, then SIGKILL and a failure
  while kill -0 "${wpid[$w]}" 2>/dev/null && [ $((SECONDS - stop_t)) -lt 45 ]; do sleep 0.2; done
  if kill -0 "${wpid[$w]}" 2>/dev/null; then
    say "$w still running 45 s after SIGTERM: SIGKILL (log $dir/$w.log)"; kill -KILL "${wpid[$w]}"; stop_rc=1
  fi
  rc=0; wait "${wpid[$w]}" || rc=$?
  wstate[$w]=dead
  say "$w exited $rc, $((SECONDS - stop_t)) s after SIGTERM"
  [ "$rc" = 0 ] || { say "warning: $w exited $rc on SIGTERM (log $dir/$w.log)"; stop_rc=1; }
done
say "workers stopped; verifying"
vrc=0
"${verify[@]}" >"$dir/verify.out" 2>&1 || vrc=$?
cat "$dir/verify.out"
summary=$(grep -E '^(records|keys) ' "$dir/verify.out" || echo "verify produced no figures")
kinds=""; for k in "${!fault_counts[@]}"; do kinds+="$k=${fault_counts[$k]} "; done
label="$source_kind"; [ "$read_mode" = polling ] || label="$source_kind $read_mode"
[ "$cdc" = 0 ] || label="$source_kind cdc upsert v$format_version"
echo "chaos: $label ($warehouse warehouse) $summary, faults $faults (${kinds% }), workers that exited by themselves $unexpected_exits, $((SECONDS - t0)) s"
if [ "$vrc" = 0 ] && [ "$stop_rc" = 0 ] && [ "$lg_rc" = 0 ]; then chaos_ok=1; echo "chaos: PASS"; exit 0; fi
echo "chaos: FAIL (verify $vrc, worker stop $stop_rc, loadgen $lg_rc); logs in $dir"
exit 1
