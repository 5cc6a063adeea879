"""loadtest/routes.sh's helpers: `produce` writes records routed by their `region` to one
topic, `scrape` follows the workers' /metrics every second (the last figures of each worker
kept, so a worker SIGKILLed keeps what it showed last), `verify` checks every table with
PyIceberg and prints the report.

Records: {"id": i, "event_time": ..., "value": 1.5, "region": "r<i % routes>"}, key = id,
partition = id % partitions; route r<k> goes to table t<k> of namespace `routed`.
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.request

SAMPLE = re.compile(r'^(\w+)\{([^}]*)\}\s+([0-9.eE+-]+)$')


def record(i, routes):
    minute = (i // 1000) % 60
    return json.dumps(
        {"id": i, "event_time": f"2026-07-09T20:{minute:02d}:00Z", "value": 1.5, "region": f"r{i % routes:02d}"},
        separators=(",", ":"),
    ).encode()


def produce(args):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20, "enable.idempotence": True})
    produced = 0
    started = time.monotonic()
    for n, i in enumerate(range(args.start, args.start + args.records)):
        if args.rate > 0 and n % 100 == 0:
            # Paced: record n leaves at start + n / rate.
            ahead = started + n / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        key = str(i).encode()
        payload = record(i, args.routes)
        while True:
            try:
                producer.produce(args.topic, payload, key=key, partition=i % args.partitions)
                break
            except BufferError:
                producer.poll(0.05)
        produced += len(key) + len(payload)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        sys.exit(f"produce: {left} records not acknowledged")
    print(produced)


def scrape_once(url):
    try:
        text = urllib.request.urlopen(url, timeout=3).read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def figures(metrics, channel):
    fetched = sum(v for labels, v in metrics.get("floe_kafka_fetched_bytes_total", []) if labels.get("channel") == channel)
    read = sum(v for labels, v in metrics.get("floe_records_read_total", []) if labels.get("channel", "").startswith(channel + "."))
    return {"fetched": fetched, "read": read}


def scrape(args):
    """Writes, every second, each worker's figures summed over its runs to `<state>`
    ({url: [figures of each run]}): a run ends when a later scrape shows lower counters (the
    worker restarted: `floe run` counts from 0); a worker that stops answering (SIGKILLed, or
    paused) keeps what it showed last."""
    state = {url: {"runs": [], "last": None} for url in args.urls}
    while True:
        for url in args.urls:
            m = scrape_once(url)
            if m is None:
                continue
            s = state[url]
            f = figures(m, args.channel)
            if s["last"] is not None and f["fetched"] < s["last"]["fetched"]:
                s["runs"].append(s["last"])
            s["last"] = f
        with open(args.state + ".tmp", "w") as out:
            json.dump({u: s["runs"] + ([s["last"]] if s["last"] else []) for u, s in state.items()}, out)
        os.replace(args.state + ".tmp", args.state)
        time.sleep(1)


def totals(state_path):
    with open(state_path) as f:
        state = json.load(f)
    fetched = read = 0.0
    for runs in state.values():
        for f in runs:
            fetched += f["fetched"]
            read += f["read"]
    return fetched, read


def delivered(catalog, routes):
    """Rows the tables hold (their current snapshots' total-records)."""
    total = 0
    for k in range(routes):
        try:
            snapshot = catalog.load_table(f"routed.t{k:02d}").current_snapshot()
        except Exception:  # not created yet
            continue
        if snapshot is not None:
            total += int(snapshot.summary.additional_properties.get("total-records", 0))
    return total


def catalog_of(args):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("floe", uri=f"sqlite:///{args.catalog}", warehouse=f"file://{args.warehouse}")


def wait(args):
    catalog = catalog_of(args)
    start = time.monotonic()
    while time.monotonic() - start < args.deadline_seconds:
        if delivered(catalog, args.routes) >= args.records:
            print(f"{time.monotonic() - start:.1f}")
            return
        time.sleep(2)
    sys.exit(f"wait: not every record delivered within {args.deadline_seconds} s")


def verify(args):
    catalog = catalog_of(args)
    expected = {}
    for i in range(args.records):
        expected.setdefault(f"t{i % args.routes:02d}", set()).add(i)
    ok = True
    for table, ids in sorted(expected.items()):
        got = catalog.load_table(f"routed.{table}").scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
        if len(got) != len(ids) or set(got) != ids:
            ok = False
            print(f"  {table}: {len(got)} rows, {len(set(got))} distinct, expected {len(ids)}", flush=True)
    fetched, read = totals(args.state)
    produced = args.produced_bytes
    print("| tables | workers | records | bytes produced (keys + payloads) | bytes fetched, all workers | fetched / produced | a consumer per table would fetch | records read by the members / produced | exactly once (PyIceberg) |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.routes} | {args.workers} | {args.records} | {produced:,.0f} | {fetched:,.0f} | {fetched / produced:.3f} | "
        f"{args.routes * produced:,.0f} ({args.routes}.000) | {read / args.records:.2f} | {'yes' if ok else 'NO'} |"
    )
    if not ok:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--topic", required=True)
    pr.add_argument("--start", type=int, required=True)
    pr.add_argument("--records", type=int, required=True)
    pr.add_argument("--routes", type=int, required=True)
    pr.add_argument("--partitions", type=int, required=True)
    pr.add_argument("--rate", type=float, default=0, help="records per second (0: flat out)")
    sc = sub.add_parser("scrape")
    sc.add_argument("--channel", required=True)
    sc.add_argument("--state", required=True)
    sc.add_argument("urls", nargs="+")
    wa = sub.add_parser("wait")
    wa.add_argument("--catalog", required=True)
    wa.add_argument("--warehouse", required=True)
    wa.add_argument("--routes", type=int, required=True)
    wa.add_argument("--records", type=int, required=True)
    wa.add_argument("--deadline-seconds", type=float, required=True)
    ve = sub.add_parser("verify")
    ve.add_argument("--state", required=True)
    ve.add_argument("--catalog", required=True)
    ve.add_argument("--warehouse", required=True)
    ve.add_argument("--records", type=int, required=True)
    ve.add_argument("--routes", type=int, required=True)
    ve.add_argument("--workers", type=int, required=True)
    ve.add_argument("--produced-bytes", type=float, required=True)
    args = p.parse_args()
    {"produce": produce, "scrape": scrape, "wait": wait, "verify": verify}[args.cmd](args)


if __name__ == "__main__":
    main()
