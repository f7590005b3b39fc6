"""The fault harness's client workloads against two real ``kafkastore serve`` processes
without faults: each workload produces, commits (and aborts) something, and the checker
finds no anomaly in what they recorded and what the log holds."""
from __future__ import annotations

import threading
import time

import pytest

from tests.helpers.jepsen.checker import ANOMALIES, check
from tests.helpers.jepsen.runner import final_read, merge_histories, offsets
from tests.helpers.jepsen.workloads import default_workloads, extra_anomalies
from tests.helpers.serve_procs import free_port, start_serve, stop_serve, wait_until_listed

RUN_S = 18.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of the default workloads on two brokers over one file:// root."""
    from kafkastore.storage import Storage
    from kafkastore.topics import create_topic

    root = f"file://{tmp_path_factory.mktemp('jepsen-workloads')}/root"
    workloads = default_workloads(seed=3)
    topics: dict = {}
    for w in workloads:
        topics.update(w.topics)
    storage = Storage(root)
    for t, n in topics.items():
        create_topic(storage, t, n)
    procs = [start_serve(root, free_port(), node_id=i) for i in range(2)]
    stop = threading.Event()
    try:
        bootstrap = ",".join(p.bootstrap for p in procs)
        wait_until_listed([p.bootstrap for p in procs])
        for w in workloads:
            w.start(bootstrap, stop)
        time.sleep(RUN_S)
        stop.set()
        for w in workloads:
            w.join(120)
        deadline = time.monotonic() + 60
        while True:    # the clients closed cleanly: nothing should stay open for long
            lso, hwm = offsets(storage, topics)
            if all(lso[k] >= hwm[k] for k in hwm) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        final = final_read(storage, topics)
    finally:
        stop.set()
        for p in procs:
            stop_serve(p)
    history = merge_histories([w.history() for w in workloads])
    history.update(final_committed=final["read_committed"],
                   final_uncommitted=final["read_uncommitted"], lso=lso, hwm=hwm,
                   open_txns={}, missing_files=[])
    return {"workloads": {w.name: w for w in workloads}, "history": history, "final": final,
            "counts": check(history), "extra": extra_anomalies(workloads, final["read_committed"])}


def _report(run):
    for name, w in run["workloads"].items():
        h = w.history()
        print(name, {k: len(v) for k, v in h.items()}, dict(w.errors()))
    print(run["counts"], run["extra"])


def test_the_checker_finds_no_anomaly(run):
    _report(run)
    assert run["counts"] == {k: 0 for k in ANOMALIES}
    assert all(v == 0 for v in run["extra"].values()), run["extra"]


def test_the_queue_produces_and_consumes_with_every_client_library(run):
    w = run["workloads"]["queue"]
    h = w.history()
    for client in ("ck-idem", "ck-plain", "aio-idem", "kp-plain"):
        assert any(v.startswith(f"queue-{client}-") for v in h["acked"]), client
    for group in ("queue-ck", "queue-aio", "queue-kp"):
        assert any(g == group for g, _, _ in h["commits"]), group
    polled = {c.split("#")[0] for c, _, o in h["polls"] if o is not None}
    assert polled == {"ck-consumer", "aio-consumer", "kp-consumer"}
    # Every acknowledged value is in the log; the consumers read records of every producer.
    log = {v for recs in run["final"]["read_committed"].values() for _, v in recs}
    assert set(h["acked"]) <= log
