#!/usr/bin/env python3
"""Deterministic generator of `Event` records (tests/data/event.schema.json) as NDJSON.

Usage: gen_events.py N OUTPUT [--seed 42]

Records look like the README example (150-200 bytes): id sequential, event_time advancing ~10 ms a
record from 2026-07-09T20:00:00Z with microsecond jitter (so 1M records span ~3 hour partitions),
source from a small set, value a double, amount a 2-decimal number, user {country, tier}, tags 0-3
strings, attrs 0-2 entries. Same N and seed give the same bytes.
"""
import argparse
import datetime
import json
import random

SOURCES = ["checkout", "search", "cart", "login", "profile", "payment", "shipping", "review"]
COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "NL", "ES", "IT"]
TAGS = ["a", "b", "promo", "mobile", "web", "beta", "vip", "new"]
ATTR_KEYS = ["k", "ref", "ab", "campaign", "device"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", type=int)
    ap.add_argument("output")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    t0 = datetime.datetime(2026, 7, 9, 20, 0, 0, tzinfo=datetime.timezone.utc)
    us = 0
    with open(a.output, "w", encoding="utf-8") as f:
        for i in range(a.n):
            us += rnd.randint(5_000, 15_000)
            ts = t0 + datetime.timedelta(microseconds=us)
            rec = {
                "id": i,
                "event_time": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "source": rnd.choice(SOURCES),
                "value": round(rnd.uniform(-1000, 1000), rnd.randint(1, 6)),
                "amount": None,
                "user": {"country": rnd.choice(COUNTRIES), "tier": rnd.randint(0, 10)},
                "tags": rnd.sample(TAGS, rnd.randint(0, 3)),
                "attrs": {k: rnd.choice(["v", "x1", "blue", "42"]) for k in rnd.sample(ATTR_KEYS, rnd.randint(0, 2))},
            }
            cents = rnd.randint(0, 1_000_000)
            line = json.dumps(rec, separators=(",", ":"))
            # amount as an exact 2-decimal JSON number (json.dumps of a float could print 12.3)
            line = line.replace('"amount":null', f'"amount":{cents // 100}.{cents % 100:02d}')
            f.write(line + "\n")


if __name__ == "__main__":
    main()
