#!/usr/bin/env python3
"""Reference for `floe bench convert`: pyarrow on one thread, read_json + write_table (ZSTD).

Usage: bench_pyarrow.py INPUT.ndjson OUTPUT.parquet [--level 3]
Prints {"work_s": S, "records": N, "records_per_s": R, "out_bytes": O} (best of --repeat runs).
"""
import argparse
import json
import os
import time

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    best = None
    for _ in range(a.repeat):
        t = time.perf_counter()
        table = pj.read_json(a.input, read_options=pj.ReadOptions(use_threads=False))
        pq.write_table(table, a.output, compression="zstd", compression_level=a.level)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    n = table.num_rows
    print(json.dumps({"work_s": best, "records": n, "records_per_s": n / best,
                      "out_bytes": os.path.getsize(a.output)}))


if __name__ == "__main__":
    main()
