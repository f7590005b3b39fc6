"""What the ACLs' and quotas' freshness bound costs a produce and a fetch on a slow store:
``./run bench document_freshness [--delay 0.3 1.0] [--requests N]``.

A broker with ``--authorizer`` and SASL PLAIN over a local directory behind
bench/counting_fs.py, which adds a fixed latency to every store request (an object store's
round trip) once the broker is up. One raw connection sends ``--requests`` produces (acks=all) and as many
fetches, one after another. For each kind it prints, per request: the store requests
made while it was in flight (all, and those under ``_cluster/``, the shared documents:
background refreshes included, they are what keeping the bound costs; also per second), how many
requests waited for a fresh read of the ACLs or quotas and how long (the time spent in
``fencing.before_serving``), the mean wall time, and the answers that were errors.
Run it from a tree with ``PYTHONPATH=<tree>`` to compare two commits in one session.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def _counting_fs(inner, delay_s: float):
    spec = importlib.util.spec_from_file_location("bench_counting_fs", os.path.join(HERE, "counting_fs.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_counting_fs"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.CountingFS(inner, delay_s=delay_s)


def run(delay_s: float, n: int) -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from kafkastore.cluster.acls import (AclBinding, Operation, PatternType, Permission,
                                         ResourceType, acl_document, add_acls)
    from kafkastore.protocol import fencing
    from kafkastore.protocol.server import BrokerThread, ServeOptions
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from tests.helpers.wire_requests import batch, fetch, produce
    from tests.protocol.wire import Wire

    waited = []   # seconds each request spent in before_serving
    original = fencing.before_serving

    async def timed_before_serving(server, *, decides=True):
        started = time.perf_counter()
        try:
            return await original(server, decides=decides)
        finally:
            waited.append(time.perf_counter() - started)

    fencing.before_serving = timed_before_serving
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = f"file://{tmp}/root"
            create_topic(Storage(root), "fresh", 1)
            add_acls(acl_document(Storage(root)), [
                AclBinding(ResourceType.TOPIC, "fresh", PatternType.LITERAL, "User:alice", "*",
                           op, Permission.ALLOW) for op in (Operation.WRITE, Operation.READ)])
            fs = _counting_fs(Storage(root).fs, 0.0)   # the latency starts once the broker is up
            count = fs._count
            fs.cluster_requests = 0

            def counted(op, nbytes=0, path=""):
                if "/_cluster/" in str(path):
                    fs.cluster_requests += 1
                return count(op, nbytes, path)

            fs._count = counted
            opts = ServeOptions(port=0, heartbeat_ms=max(500, int(delay_s * 3000)),
                                credentials={"alice": "pw", "admin": "pw"}, authorizer=True,
                                super_users=("User:admin",))
            with BrokerThread(Storage(root, fs=fs), opts) as broker:
                w = Wire(broker.bootstrap, timeout=120)
                assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
                assert int(w.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0pw")).error_code) == 0
                fs.delay_s = delay_s
                time.sleep(3 * delay_s + 2)   # the background reads settle to the new latency
                for kind in ("produce", "fetch"):
                    before_all, before_cluster = fs.snapshot().total_requests, fs.cluster_requests
                    del waited[:]
                    errors, started = 0, time.perf_counter()
                    for i in range(n):
                        if kind == "produce":
                            code = produce(w, "fresh", 0, batch([b"v" * 100]))[0]
                        else:
                            code = int(fetch(w, "fresh", 0, i).error_code)
                        errors += code != 0
                    took = time.perf_counter() - started
                    total = fs.snapshot().total_requests - before_all
                    cluster = fs.cluster_requests - before_cluster
                    slow = [s for s in waited if s > delay_s / 2]
                    print(f"  delay {delay_s:g} s  {kind:<7}  store requests/request {total / n:5.1f} "
                          f"(_cluster/ {cluster / n:4.1f}, {cluster / took:.1f}/s)  waited for a fresh read: {len(slow)}/{n} "
                          f"(mean wait {sum(waited) / max(1, len(waited)):.2f} s, max "
                          f"{max(waited, default=0):.2f} s)  wall/request {took / n:.2f} s  "
                          f"errors {errors}  load {os.getloadavg()[0]:.1f}", flush=True)
                w.close()
    finally:
        fencing.before_serving = original


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, nargs="+", default=[0.3, 1.0],
                    help="seconds added to every store request")
    ap.add_argument("--requests", type=int, default=8, help="produces, then fetches")
    args = ap.parse_args()
    import kafkastore

    print(f"tree: {os.path.dirname(os.path.dirname(kafkastore.__file__))}")
    for delay in args.delay:
        run(delay, args.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
