"""The fault harness's long run: ``./run bench jepsen --minutes N [--s3] [--seed S]``.

Brokers over one root (file://, or with --s3 an S3 bucket on a moto server started here,
reached through the fault proxy), the workloads of tests/helpers/jepsen, and a seeded
schedule mixing every fault kind of the root kind (SIGKILL, SIGSTOP past the session and
transaction timeouts, restarts with a clock skewed by 60-90 s; on S3 also lost responses,
500/503 storms and latency). Prints a table (records, transactions, faults by kind, each
anomaly count) and exits 1 if any anomaly is above 0. --workdir keeps the broker logs.
"""
import argparse
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.helpers.jepsen.checker import format_table  # noqa: E402
from tests.helpers.jepsen.runner import RunOptions, run_cluster  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--s3", action="store_true", help="an S3 root (moto on loopback) behind the fault proxy")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--skewed-start-ms", type=int, default=75_000,
                    help="the last broker starts with its clock this far ahead (0: none)")
    ap.add_argument("--workdir", help="keep broker logs here (default: a temporary directory)")
    args = ap.parse_args()
    # SIGTERM and SIGINT (ignored by default in a background job) end the run through its
    # clean-up: brokers, proxy and moto stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    opts = RunOptions(root_kind="s3" if args.s3 else "file", seconds=args.minutes * 60,
                      seed=args.seed, brokers=args.brokers, skewed_start_ms=args.skewed_start_ms,
                      workdir=args.workdir)
    counts, extra = run_cluster(opts, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(format_table(counts, extra), flush=True)
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
