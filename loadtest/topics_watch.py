"""loadtest/topics.sh's helpers: `produce` writes the records to every topic, `watch` follows
the worker until every table holds its records, then measures it idle, and prints the report.

Figures: threads (/proc/<pid>/status Threads), open file descriptors (/proc/<pid>/fd), RSS
(VmRSS), the tables complete (floe_rows_delivered_total of each member channel `<channel>.<topic>`
at least the records per topic), catalog table loads per second once idle
(floe_catalog_table_loads_total), lease-store rows written per renew interval once idle (rows of
floe_leases and floe_workers whose heartbeat changed between two snapshots one interval apart).
"""

import argparse
import json
import os
import re
import sqlite3
import sys
import time
import urllib.request


def produce(args):
    from confluent_kafka import Producer

    with open(args.records) as f:
        lines = [line.strip() for line in f if line.strip()]
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20})
    for topic in args.topics:
        for line in lines:
            rid = json.loads(line)["id"]
            producer.produce(topic, line.encode(), key=str(rid).encode(), partition=rid % args.partitions)
            producer.poll(0)
    left = producer.flush(60)
    if left:
        sys.exit(f"produce: {left} records not acknowledged")


def proc_figures(pid):
    status = open(f"/proc/{pid}/status").read()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
    rss_kib = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return threads, fds, rss_kib / 1024


SAMPLE = re.compile(r'^(\w+)\{([^}]*)\}\s+([0-9.eE+-]+)$')


def scrape(url):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def total(metrics, name):
    return sum(v for _, v in metrics.get(name, []))


def complete_tables(metrics, channel, records):
    return sum(
        1
        for labels, v in metrics.get("floe_rows_delivered_total", [])
        if labels.get("channel", "").startswith(channel + ".") and v >= records
    )


def heartbeats(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = {}
        for table, key in (("floe_leases", "lease_key"), ("floe_workers", "worker")):
            for channel, k, hb in db.execute(f"SELECT channel, {key}, heartbeat FROM {table}"):
                rows[(table, channel, k)] = hb
        return rows
    finally:
        db.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return os.path.exists(f"/proc/{pid}/status")


def watch(args):
    start = time.monotonic()
    peak = (0, 0, 0.0)
    done_at = None
    last_print = 0.0
    while True:
        if not alive(args.pid):
            sys.exit("watch: the worker exited")
        now = time.monotonic() - start
        threads, fds, rss = proc_figures(args.pid)
        peak = (max(peak[0], threads), max(peak[1], fds), max(peak[2], rss))
        metrics = scrape(args.metrics) or {}
        complete = complete_tables(metrics, args.channel, args.records)
        if now - last_print >= 10:
            print(f"  [{now:6.1f}s] tables complete {complete}/{args.topics}, threads {threads}, fds {fds}, rss {rss:.0f} MiB", flush=True)
            last_print = now
        if complete >= args.topics:
            done_at = now
            break
        if now > args.deadline_seconds:
            break
        time.sleep(1)
    # Idle: nothing new is produced. The rates are taken over the last 30 s of the idle
    # period (the whole period when shorter), after the one-off loads that follow the last
    # commits (each worker's load after its batch left the pending set, each committer's first
    # idle hint check).
    window = min(30.0, args.idle_seconds)
    time.sleep(max(0.0, args.idle_seconds - window))
    m0 = scrape(args.metrics) or {}
    t0 = time.monotonic()
    before = heartbeats(args.leases)
    time.sleep(args.renew_seconds)
    after = heartbeats(args.leases)
    written = sum(1 for k, hb in after.items() if before.get(k) != hb)
    time.sleep(max(0.0, window - (time.monotonic() - t0)))
    m1 = scrape(args.metrics) or {}
    elapsed = time.monotonic() - t0
    loads = (total(m1, "floe_catalog_table_loads_total") - total(m0, "floe_catalog_table_loads_total")) / elapsed
    by = {}
    for m, sign in ((m1, 1), (m0, -1)):
        for labels, v in m.get("floe_catalog_table_loads_total", []):
            by[labels.get("by", "")] = by.get(labels.get("by", ""), 0) + sign * v
    loads_by = {k: round(v / elapsed, 2) for k, v in sorted(by.items())}
    threads, fds, rss = proc_figures(args.pid)
    complete = complete_tables(m1, args.channel, args.records)
    until = f"{done_at:.1f} s" if done_at is not None else f"never (after {args.deadline_seconds} s: {complete} complete)"
    report = {
        "topics": args.topics,
        "until_every_table_complete": until,
        "peak_threads": peak[0],
        "peak_fds": peak[1],
        "peak_rss_mib": round(peak[2]),
        "idle_threads": threads,
        "idle_fds": fds,
        "idle_rss_mib": round(rss),
        "idle_catalog_loads_per_s": round(loads, 2),
        "idle_catalog_loads_per_s_by": loads_by,
        "idle_lease_rows_written_per_renew_interval": written,
        "lease_rows": len(after),
    }
    print("| topics | until every table held its records | threads (peak / idle) | fds (peak / idle) | RSS MiB (peak / idle) | catalog loads/s idle | lease-store rows written per renew_interval idle |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.topics} | {until} | {peak[0]} / {threads} | {peak[1]} / {fds} | {peak[2]:.0f} / {rss:.0f} | {loads:.2f} | {written} of {len(after)} |")
    print(json.dumps(report))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--records", required=True)
    pr.add_argument("--partitions", type=int, required=True)
    pr.add_argument("topics", nargs="+")
    w = sub.add_parser("watch")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--metrics", required=True)
    w.add_argument("--leases", required=True)
    w.add_argument("--channel", required=True)
    w.add_argument("--topics", type=int, required=True)
    w.add_argument("--records", type=int, required=True)
    w.add_argument("--renew-seconds", type=float, required=True)
    w.add_argument("--idle-seconds", type=float, required=True)
    w.add_argument("--deadline-seconds", type=float, required=True)
    args = p.parse_args()
    produce(args) if args.cmd == "produce" else watch(args)


if __name__ == "__main__":
    main()
