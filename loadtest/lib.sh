# Shared pieces of the loadtest scripts (chaos.sh, churn.sh): sourced, never run.
#
#   lt_binaries NAME PROFILE   sets floe, loadgen, mock_kafka, py: $FLOE_BIN, $FLOE_LOADGEN_BIN,
#                              $FLOE_MOCK_KAFKA_BIN, $FLOE_PYTHON when set, else
#                              $CARGO_TARGET_DIR/PROFILE (or target/PROFILE) and .venv; exits 2
#                              naming the one missing
#   lt_workdir NAME [DIR]      sets dir (DIR, or a new /tmp/floe-NAME.XXXXXX; made, absolute) and
#                              starts the clock of say (prints `NAME [  Ns] message`)
#   lt_start_mock_kafka LOG TOPIC PARTITIONS
#                              starts floe-mock-kafka (until this shell exits or kills it);
#                              sets bootstrap and broker_pid
# Needs $root (the repository).

lt_binaries() {
  local name="$1" profile="$2" b
  local target="${CARGO_TARGET_DIR:-$root/target}/$profile"
  floe="${FLOE_BIN:-$target/floe}"
  loadgen="${FLOE_LOADGEN_BIN:-$target/floe-loadgen}"
  mock_kafka="${FLOE_MOCK_KAFKA_BIN:-$target/floe-mock-kafka}"
  py="${FLOE_PYTHON:-$root/.venv/bin/python}"
  for b in "$floe" "$loadgen" "$mock_kafka" "$py"; do
    [ -x "$b" ] || { echo "$name: $b is missing (cargo build --bins)" >&2; exit 2; }
  done
}

lt_start_mock_kafka() {
  local log="$1" topic="$2" partitions="$3" line
  coproc BROKER { exec "$mock_kafka" --topic "$topic" --partitions "$partitions" --exit-on-stdin-eof 2>"$log"; }
  broker_pid=$BROKER_PID
  read -r line <&"${BROKER[0]}"
  bootstrap="${line#bootstrap=}"
}

lt_workdir() {
  lt_name="$1"
  dir="${2:-$(mktemp -d "/tmp/floe-$1.XXXXXX")}"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  t0=$SECONDS
}
say() { printf '%s [%4ds] %s\n' "$lt_name" "$((SECONDS - t0))" "$*"; }
