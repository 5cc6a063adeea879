#!/usr/bin/env bash
# floe's test command (README.md): installs what the tests need, builds, runs every test.
#   - a Python virtualenv (.venv in the checkout, ignored by git; FLOE_VENV=DIR puts it elsewhere, e.g. a
#     cache directory) with PyIceberg and DuckDB (the two independent Iceberg readers)
#   - the Rust build (librdkafka is compiled from source by rdkafka; needs gcc and make)
#   - a PostgreSQL server on loopback (deploy/local/postgres.sh: Debian's packages, port 55432),
#     for the PostgreSQL lease store and SQL catalog tests; its URL exported
#     (FLOE_TEST_POSTGRES_URL); stopped on exit unless it was already running
#   - the local AWS emulators (deploy/local/README.md): patched moto and kinesalite, started here,
#     checked by deploy/local/smoke.py, their endpoints exported (FLOE_TEST_AWS_ENDPOINT,
#     FLOE_TEST_KINESALITE_ENDPOINT, AWS_*), stopped on exit unless they were already running
#   - the local Confluent-compatible schema registry (deploy/local/schema-registry.sh), with the pinned
#     Confluent serializers installed into .venv (deploy/local/schema-registry-requirements.txt), checked
#     by deploy/local/schema_registry_smoke.py with those serializers, its URL exported
#     (FLOE_TEST_SCHEMA_REGISTRY_URL), stopped on exit unless it was already running
# Then: unit, conformance, shared-case, integration and crash tests (cargo test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export FLOE_VENV="${FLOE_VENV:-$root/.venv}"
venv="$FLOE_VENV"

if ! "$venv/bin/python" -c 'import pyiceberg, pyarrow, sqlalchemy, psycopg2, duckdb' 2>/dev/null; then
  echo "setting up $venv with PyIceberg and DuckDB (the two independent Iceberg readers)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'pyiceberg[sql-sqlite,sql-postgres,pyarrow]==0.12.0' \
    duckdb==1.4.4 duckdb-ext-iceberg==1.4.4.20260205 duckdb-ext-avro==1.4.4.20260205
fi
export FLOE_PYTHON="$venv/bin/python"
# The Confluent serializers the tests produce Avro, Protobuf and JSON Schema records with (pinned).
deploy/local/schema-registry.sh install

stop_on_exit=()
if ! deploy/local/aws-emulators.sh status >/dev/null 2>&1; then
  stop_on_exit+=("deploy/local/aws-emulators.sh stop >/dev/null")
fi
if ! deploy/local/postgres.sh status >/dev/null 2>&1; then
  stop_on_exit+=("deploy/local/postgres.sh stop >/dev/null")
fi
if ! deploy/local/schema-registry.sh status >/dev/null 2>&1; then
  stop_on_exit+=("deploy/local/schema-registry.sh stop >/dev/null")
fi
if [ ${#stop_on_exit[@]} -gt 0 ]; then
  trap "$(IFS=';'; echo "${stop_on_exit[*]}")" EXIT
fi
deploy/local/postgres.sh start
eval "$(deploy/local/postgres.sh env)"
deploy/local/aws-emulators.sh start
eval "$(deploy/local/aws-emulators.sh env)"
"$venv/bin/python" deploy/local/smoke.py
deploy/local/schema-registry.sh start
eval "$(deploy/local/schema-registry.sh env)"
"$venv/bin/python" deploy/local/schema_registry_smoke.py

# `cargo test` builds the binaries the tests spawn (target/debug/floe, floe-mock-kafka,
# floe-loadgen, floe-fleet-sim) with the tests' feature set.
cargo test --features testsuite --no-fail-fast -- --test-threads 2
