#!/usr/bin/env python3
"""The measuring half of loadtest/churn.sh: a /metrics scraper and the per-scenario report.

  churn_report.py scrape --out SAMPLES.jsonl --worker NAME=PORT [--worker ...]
      Every second, GET http://127.0.0.1:PORT/metrics of every worker (a worker that is down is
      skipped) and append one JSON line per answer: t (epoch s), worker, freshness
      (floe_data_freshness_seconds), read (floe_records_read_total), reread
      (floe_records_reread_total, null when not exported). Runs until killed.

  churn_report.py report --dir DIR --profile P --rate R --freshness S [--reread-known] SCENARIO...
      For each DIR/SCENARIO written by churn.sh, prints one row of a Markdown table:
      produced    the manifest's acknowledged records
      read        sum of floe_records_read_total over final-*.prom (each worker process scraped
                  just before it stopped, and at the end)
      read/prod   read amplification
      re-read     sum of floe_records_reread_total over the same scrapes (and per cause); when
                  none is scraped: 0 with --reread-known (the workers' binary has the counter,
                  which is exported once it counts), else n/a
      freshness   max and p95 over seconds of the fleet's floe_data_freshness_seconds (max over
                  the workers scraped in that second)
      delay       max and p95 over records of commit time − produce time: commit time is the
                  timestamp of the snapshot that added the record's data file (PyIceberg, current
                  snapshot's manifests; churn.sh disables compaction and expiry), produce time is
                  loadgen's start + (id − start id) / rate (loadgen paces its sends)
      exactly once  verify.py's figures (missing, duplicated)
      load        /proc/loadavg at the scenario's start and after its drain
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))

METRIC = re.compile(r"^(floe_[a-z_]+)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text):
    """{name: sum over its series} of the floe_ metrics in a Prometheus text exposition."""
    sums = {}
    for line in text.splitlines():
        m = METRIC.match(line.strip())
        if m:
            try:
                sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                pass
    return sums


REREAD = re.compile(r'^floe_records_reread_total\{[^}]*cause="([^"]+)"[^}]*\}\s+(\S+)$')


def reread_by_cause(text):
    """{cause: records} of floe_records_reread_total in a Prometheus text exposition."""
    causes = {}
    for line in text.splitlines():
        m = REREAD.match(line.strip())
        if m:
            causes[m.group(1)] = causes.get(m.group(1), 0.0) + float(m.group(2))
    return causes


def scrape(a):
    workers = [w.split("=", 1) for w in a.worker]
    with open(a.out, "a", encoding="utf-8") as out:
        while True:
            t = time.time()
            for name, port in workers:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=0.5) as r:
                        m = parse_metrics(r.read().decode())
                except Exception:
                    continue
                out.write(json.dumps({
                    "t": t, "worker": name,
                    "freshness": m.get("floe_data_freshness_seconds"),
                    "read": m.get("floe_records_read_total"),
                    "reread": m.get("floe_records_reread_total"),
                }) + "\n")
            out.flush()
            time.sleep(max(0.0, 1.0 - (time.time() - t)))


def quantile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def manifest_of(path):
    header = done = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.get("kind") == "header":
                header = d
            elif d.get("kind") == "done":
                done = d
    return header, done


def record_delays(sdir, start_id, produce_start, rate):
    """Commit time − produce time (s) of every record in the table."""
    import pyarrow.parquet as pq
    from read_table import open_catalog

    t = open_catalog(os.path.join(sdir, "catalog.sqlite"), os.path.join(sdir, "warehouse")).load_table("churn.events")
    snap = t.current_snapshot()
    if snap is None:
        return []
    committed_at = {s.snapshot_id: s.timestamp_ms / 1000.0 for s in t.metadata.snapshots}
    delays = []
    for manifest in snap.manifests(t.io):
        for entry in manifest.fetch_manifest_entry(t.io, discard_deleted=True):
            at = committed_at[entry.snapshot_id]
            path = entry.data_file.file_path.removeprefix("file://")
            for i in pq.read_table(path, columns=["id"]).column("id").to_pylist():
                delays.append(at - (produce_start + (i - start_id) / rate))
    return delays


def fmt(x, unit=" s"):
    return "n/a" if x is None else f"{x:.1f}{unit}"


def report(a):
    print()
    print(f"workers: {a.profile} build; data_freshness {a.freshness} s; loadgen at {a.rate} records/s")
    print()
    print("| scenario | produced | read | read / produced | re-read | freshness max | freshness p95 "
          "| delay max | delay p95 | exactly once | load avg start → end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.scenario:
        sdir = os.path.join(a.dir, name)
        header, done = manifest_of(os.path.join(sdir, "manifest.jsonl"))
        produced = int(done["acknowledged"]) if done else 0
        read, reread, reread_seen, causes = 0.0, 0.0, False, {}
        for f in sorted(os.listdir(sdir)):
            if f.startswith("final-") and f.endswith(".prom"):
                with open(os.path.join(sdir, f), encoding="utf-8") as fh:
                    text = fh.read()
                m = parse_metrics(text)
                read += m.get("floe_records_read_total", 0.0)
                if "floe_records_reread_total" in m:
                    reread_seen = True
                    reread += m["floe_records_reread_total"]
                for cause, n in reread_by_cause(text).items():
                    causes[cause] = causes.get(cause, 0.0) + n
        per_second = {}
        with open(os.path.join(sdir, "samples.jsonl"), encoding="utf-8") as f:
            for line in f:
                s = json.loads(line)
                if s["freshness"] is not None:
                    k = int(s["t"])
                    per_second[k] = max(per_second.get(k, 0.0), s["freshness"])
        fresh = list(per_second.values())
        with open(os.path.join(sdir, "loadgen.start"), encoding="utf-8") as f:
            produce_start = float(f.read().strip())
        delays = record_delays(sdir, int(header["start_id"]), produce_start, a.rate)
        figures = "verify: no figures"
        with open(os.path.join(sdir, "verify.out"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"records (\d+), delivered (\d+), .*missing (\d+), duplicated (\d+)", line)
                if m:
                    figures = f"missing {m.group(3)}, duplicated {m.group(4)}"
        load = {}
        with open(os.path.join(sdir, "load.txt"), encoding="utf-8") as f:
            for line in f:
                k, _, v = line.strip().partition(" ")
                load[k] = v
        ok = "yes" if load.get("verify_rc") == "0" else "NO"
        amp = read / produced if produced else float("nan")
        by_cause = ", ".join(f"{c} {int(n):,}" for c, n in sorted(causes.items()))
        reread_cell = f"{int(reread):,}" + (f" ({by_cause})" if by_cause else "")
        if not reread_seen:
            reread_cell = "0" if a.reread_known else "n/a"
        print(f"| {name} | {produced:,} | {int(read):,} | {amp:.2f} | "
              f"{reread_cell} | {fmt(max(fresh) if fresh else None)} | "
              f"{fmt(quantile(fresh, 0.95))} | {fmt(max(delays) if delays else None)} | "
              f"{fmt(quantile(delays, 0.95))} | {ok} ({figures}) | "
              f"{load.get('load_start', '?')} → {load.get('load_end', '?')} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scrape")
    s.add_argument("--out", required=True)
    s.add_argument("--worker", action="append", required=True)
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--profile", required=True)
    r.add_argument("--rate", type=float, required=True)
    r.add_argument("--freshness", required=True)
    r.add_argument("--reread-known", action="store_true",
                   help="the workers' binary has floe_records_reread_total: none scraped means 0")
    r.add_argument("scenario", nargs="+")
    a = ap.parse_args()
    scrape(a) if a.cmd == "scrape" else report(a)


if __name__ == "__main__":
    main()
