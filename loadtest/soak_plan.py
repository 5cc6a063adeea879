"""Times PyIceberg's scan planning of a floe table: `plan_files()` on the current snapshot,
the way a reader starts every query. Prints one JSON line {"plan_s": S, "files": N}.

usage: soak_plan.py CATALOG_SQLITE NAMESPACE.TABLE
"""
import json
import sys
import time

from pyiceberg.catalog.sql import SqlCatalog

catalog_path, ident = sys.argv[1], sys.argv[2]
catalog = SqlCatalog("floe", uri=f"sqlite:///{catalog_path}", warehouse="file:///unused")
table = catalog.load_table(ident)
best = None
files = 0
for _ in range(3):
    started = time.perf_counter()
    files = len(list(table.scan().plan_files()))
    took = time.perf_counter() - started
    best = took if best is None else min(best, took)
print(json.dumps({"plan_s": round(best, 3), "files": files}))
