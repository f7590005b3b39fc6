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
    from kafkastore.topics.admin import create_topic

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
    return {"root": root, "workloads": {w.name: w for w in workloads}, "history": history,
            "final": final,
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


def test_transactions_span_partitions_of_two_topics_and_end_both_ways(run):
    w = run["workloads"]["txn"]
    h = w.history()
    assert h["committed_txns"] and h["aborted_txns"], dict(w.errors())
    assert all({t for t, _ in parts} == {"jt-a", "jt-b"} and len(parts) >= 2
               for parts in h["committed_txns"].values())
    # Both clients' transactions (confluent-kafka's and aiokafka's) ended both ways, and
    # their groups' offsets went with committed transactions.
    for client in ("txn-ck-txn-", "txn-aio-txn-"):
        assert any(t.startswith(client) for t in h["committed_txns"]), client
        assert any(t.startswith(client) for t in h["aborted_txns"]), client
    assert {g for g, _, _ in h["commits"]} == {"txn-g", "txn-aio-g"}
    log = {v for recs in run["final"]["read_committed"].values() for _, v in recs}
    committed = {v for parts in h["committed_txns"].values() for vs in parts.values() for v in vs}
    aborted = {v for parts in h["aborted_txns"].values() for vs in parts.values() for v in vs}
    assert committed <= log and not (aborted & log)


def test_the_exactly_once_pipeline_commits_aborts_and_outputs_each_input_once(run):
    w = run["workloads"]["eos"]
    h = w.history()
    assert h["committed_txns"] and h["aborted_txns"], dict(w.errors())
    assert any(g == "eos-g" for g, _, _ in h["commits"])
    assert w.extra_anomalies(run["final"]["read_committed"]) == \
        {"eos-duplicate": 0, "eos-missing-output": 0}
    # The pipeline got through input it had to reprocess after its aborts.
    outputs = [v for (t, _), recs in run["final"]["read_committed"].items() if t == "je-out"
               for _, v in recs]
    assert len(outputs) > 0


def test_the_eos_count_finds_a_duplicated_output_and_a_commit_without_output():
    from tests.helpers.jepsen.workloads import count_eos_anomalies

    q0, out = ("jq", 0), ("je-out", 0)
    final = {q0: [(0, "a"), (1, "b"), (2, "c")],
             out: [(0, "eos|jq|0|0|t1|a"), (1, "eos|jq|0|1|t1|b")]}
    commits = [("eos-g", q0, 2)]
    assert count_eos_anomalies(final, commits, "eos-g", "je-out") == \
        {"eos-duplicate": 0, "eos-missing-output": 0}
    final[out].append((2, "eos|jq|0|1|t3|b"))                 # input 1 output twice
    commits.append(("eos-g", q0, 3))                           # offset 3 committed: c has none
    commits.append(("other", q0, 9))                           # another group's: not counted
    assert count_eos_anomalies(final, commits, "eos-g", "je-out") == \
        {"eos-duplicate": 1, "eos-missing-output": 1}



@pytest.mark.slow
def test_a_load_into_iceberg_equals_the_read_committed_log(run, spark, tmp_path):
    """The run's queue topic (producers of every library) and a transactional topic (with
    aborted transactions) loaded into SQLite-catalog tables equal their read_committed logs."""
    from tests.helpers.jepsen.workloads import load_into_iceberg

    final = run["final"]["read_committed"]
    for topic in ("jq", "jt-a"):
        got = load_into_iceberg(run["root"], topic, str(tmp_path / topic), spark=spark,
                                table=topic.replace("-", "_"))
        assert got["iceberg-mismatch"] == 0, topic
        assert got["iceberg-rows"] == sum(len(v) for (t, _), v in final.items() if t == topic) > 0
