"""Print a deterministic sample stream as kafkastore JSON lines (for the demo).

    python scripts/sample_data.py orders 10000 [--seed 1] [--start-ms MS]
    python scripts/sample_data.py customers 2000
"""
import argparse
import json
import random
import sys
import time

COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "CN", "NL"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("orders", "customers"))
    ap.add_argument("count", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start-ms", type=int, default=None,
                    help="timestamp of the first record (default: count seconds ago)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    now = int(time.time() * 1000)
    start = args.start_ms if args.start_ms is not None else now - args.count * 1000
    out = sys.stdout
    for i in range(args.count):
        ts = start + i * 1000
        if args.kind == "orders":
            customer = f"c{rng.randrange(500):04d}"
            value = {"order_id": f"o{args.seed}-{i:07d}", "customer": customer,
                     "amount": round(rng.uniform(1, 500), 2), "currency": "EUR", "ts": ts}
            rec = {"key": customer, "value": value, "timestamp": ts,
                   "headers": [["source", "demo"]]}
        else:
            customer = f"c{rng.randrange(500):04d}"
            if rng.random() < 0.05:
                rec = {"key": customer, "value": None, "timestamp": ts}  # tombstone: customer deleted
            else:
                rec = {"key": customer, "timestamp": ts,
                       "value": {"customer": customer, "name": f"Customer {customer} v{i}",
                                 "country": rng.choice(COUNTRIES)}}
        out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
