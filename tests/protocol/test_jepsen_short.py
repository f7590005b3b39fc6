"""The fault harness's parts against real moto: the S3 fault proxy loses responses after
moto applied the request, answers 5xx storms without forwarding, and adds latency."""
from __future__ import annotations

import boto3
import botocore.config
import botocore.exceptions
import pytest

from tests.helpers.jepsen.s3_fault_proxy import FaultProxy


@pytest.fixture
def proxy(s3_endpoint):
    p = FaultProxy(s3_endpoint).start()
    try:
        yield p
    finally:
        p.stop()


def _client(endpoint):
    cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                 connect_timeout=5, read_timeout=10)
    return boto3.client("s3", endpoint_url=endpoint, config=cfg)


def test_a_lost_response_was_applied_by_the_store(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    # Every attempt loses its answer (the S3 client may retry a dropped connection itself).
    fault = proxy.add("lose", methods=("PUT",), path_part="/lost-key")
    with pytest.raises((botocore.exceptions.ConnectionClosedError,
                        botocore.exceptions.EndpointConnectionError,
                        botocore.exceptions.ReadTimeoutError)):
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/lost-key", Body=b"applied")
    assert proxy.counts["lose"] == fault.hits >= 1
    proxy.clear()
    # Straight to moto: the PUT whose answer was lost is there.
    direct = _client(s3_endpoint)
    got = direct.get_object(Bucket="kafkastore-test", Key="jepsen/lost-key")["Body"].read()
    assert got == b"applied"


def test_a_5xx_after_apply_is_answered_to_a_write_that_landed(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    fault = proxy.add("fail", methods=("PUT",), path_part="/failed-key", status=500,
                      header="If-None-Match", count=1)
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/failed-key", Body=b"plain")  # no header
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/failed-key2", Body=b"applied",
                      IfNoneMatch="*")
    # The 500 itself, or the S3 client's own retry meeting the write that landed (412).
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] in (500, 412)
    assert fault.paths == ["/kafkastore-test/jepsen/failed-key2"] and proxy.counts["fail"] == 1
    got = _client(s3_endpoint).get_object(Bucket="kafkastore-test", Key="jepsen/failed-key2")
    assert got["Body"].read() == b"applied"


def test_a_storm_answers_503_without_forwarding(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    fault = proxy.add("storm", methods=("PUT",), path_part="/stormy", status=503)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"x")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    with pytest.raises(botocore.exceptions.ClientError):
        _client(s3_endpoint).head_object(Bucket="kafkastore-test", Key="jepsen/stormy")
    # A HEAD in a storm gets a bodiless 503; the connection stays usable for the next call.
    head_storm = proxy.add("storm", methods=("HEAD",), path_part="/stormy", status=503)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3.head_object(Bucket="kafkastore-test", Key="jepsen/stormy")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503 and head_storm.hits >= 1
    storm_hits = fault.hits + head_storm.hits
    assert storm_hits >= 1
    proxy.clear()   # the storm is over: the next PUT goes through
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"y")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/stormy")["Body"].read() == b"y"
    assert proxy.counts["storm"] == storm_hits and proxy.counts["forwarded"] >= 2


def test_a_storm_answer_to_a_head_has_no_body(proxy):
    """A HEAD answered by a storm carries no body: on a kept-alive connection a body would
    be read as the status line of the next answer (aiohttp, under s3fs, fails on it)."""
    import socket

    proxy.add("storm", methods=("HEAD",), path_part="/head-storm", status=503)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(b"HEAD /kafkastore-test/jepsen/head-storm HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got:
            got += sock.recv(65536)
        sock.sendall(b"GET /kafkastore-test/jepsen/head-storm HTTP/1.1\r\nHost: x\r\n\r\n")
        while got.count(b"HTTP/1.1 ") < 2 or not got.endswith(b"</Error>"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    head, rest = got.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503")
    assert rest.startswith(b"HTTP/1.1 404"), rest[:80]   # the next answer, not a stray body


def test_latency_forwards_after_the_delay(proxy):
    s3 = _client(proxy.endpoint)
    proxy.add("latency", methods=("GET",), path_part="/slow", delay_s=0.2, count=1)
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/slow", Body=b"z")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/slow")["Body"].read() == b"z"
    assert proxy.counts["latency"] == 1



def test_stop_returns_while_a_client_keeps_an_idle_connection_open(s3_endpoint):
    """A client's pool keeps its connection to the proxy open after its last request (the
    runner's own S3 reads do); stopping the proxy must not wait for that client to hang up,
    or a run would never end. (``ThreadingHTTPServer.server_close`` joins every handler
    thread that is not a daemon, and a keep-alive handler waits for the next request.)"""
    import http.client
    import threading

    p = FaultProxy(s3_endpoint).start()
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    conn.request("GET", "/kafkastore-test?list-type=2")
    conn.getresponse().read()            # keep-alive: the connection stays open, idle
    stopper = threading.Thread(target=p.stop, daemon=True)
    stopper.start()
    stopper.join(30)
    try:
        assert not stopper.is_alive(), "FaultProxy.stop() waits for an idle keep-alive client"
    finally:
        conn.close()

# -- the checker, on hand-made histories -----------------------------------------------------
from tests.helpers.jepsen.checker import ANOMALIES, check, format_table  # noqa: E402


A0, A1 = ("a", 0), ("a", 1)   # (topic, partition), as the runner keys partitions
B0 = ("b", 0)


def _clean_history():
    log = {A0: [(0, "a"), (1, "b"), (3, "t1-0")], A1: [(0, "t1-1")], B0: [(0, "t1-b")]}
    return {"acked": ["a", "b"],
            "committed_txns": {"t1": {A0: ["t1-0"], A1: ["t1-1"], B0: ["t1-b"]}},
            "aborted_txns": {"t2": {A0: ["t2-0"]}},
            "final_committed": log,
            "final_uncommitted": {A0: [(0, "a"), (1, "b"), (2, "t2-0"), (3, "t1-0")],
                                  A1: [(0, "t1-1")], B0: [(0, "t1-b")]},
            "polls": [("c", A0, 0), ("c", A0, 1), ("c", A0, 3), ("c", B0, 0)],
            "commits": [("g", A0, 1), ("g", A0, 2), ("g", B0, 1)],
            "lso": {A0: 5, A1: 2, B0: 1}, "hwm": {A0: 5, A1: 2, B0: 1}, "open_txns": {},
            "missing_files": []}


def test_the_checker_counts_nothing_on_a_clean_history():
    # Polling 1 then 3 passes over the aborted record at offset 2: not a skip.
    h = _clean_history()
    assert check(h) == {k: 0 for k in ANOMALIES}


def test_the_checker_counts_each_anomaly():
    h = _clean_history()
    h["acked"].append("never-read")                                     # lost
    h["final_uncommitted"][A1].append((1, "t1-1"))                      # duplicated
    h["final_committed"][A0].append((2, "t2-0"))                        # aborted-read
    h["final_committed"][B0] = []                                       # torn (t1), t1-b lost
    h["polls"] = [("c", A0, 0), ("c", A0, 3), ("c", A0, 1),             # skips 1 and 2 (now
                  ("c", A0, None), ("c", A0, 0)]                        # read); back: 1; mark
    h["commits"].append(("g", A0, 1))                                   # regression
    h["lso"][A1] = 1                                                    # hanging
    h["missing_files"] = ["t/0/seg-1.kfs"]
    counts = check(h)
    assert counts == {"lost": 2, "duplicated": 1, "aborted-read": 1, "torn": 1, "poll-skip": 2,
                      "nonmonotonic-poll": 1, "committed-offset-regression": 1,
                      "hanging-lso": 1, "missing-file": 1}
    table = format_table(counts, {"records": 4})
    assert table.splitlines()[0].split() == ["records", "4"] and "hanging-lso" in table


def test_the_same_partition_number_of_two_topics_is_two_partitions():
    """A poll of b/0 between polls of a/0 is neither a skip nor a step back on a/0, and a
    commit on b/0 does not regress a/0's."""
    log = {A0: [(o, f"a{o}") for o in range(3)], B0: [(o, f"b{o}") for o in range(3)]}
    h = {"acked": [v for recs in log.values() for _, v in recs], "final_committed": log,
         "final_uncommitted": log,
         "polls": [("c", A0, 0), ("c", B0, 2), ("c", A0, 1), ("c", B0, 0), ("c", A0, 2)],
         "commits": [("g", A0, 3), ("g", B0, 1)]}
    counts = check(h)
    assert counts["poll-skip"] == 0 and counts["committed-offset-regression"] == 0
    assert counts["nonmonotonic-poll"] == 1      # b/0: 2 then 0 without a reassignment


def test_merged_histories_keep_every_workload():
    from tests.helpers.jepsen.runner import merge_histories

    h = merge_histories([{"acked": ["a"], "polls": [("c1", A0, 0)], "at_least_once": ("p-",)},
                         {"acked": ["b"], "committed_txns": {"t": {B0: ["x"]}},
                          "aborted_txns": {"u": {B0: ["y"]}}, "commits": [("g", B0, 1)]}])
    assert h["acked"] == ["a", "b"] and h["polls"] == [("c1", A0, 0)]
    assert h["committed_txns"] == {"t": {B0: ["x"]}} and h["aborted_txns"] == {"u": {B0: ["y"]}}
    assert h["commits"] == [("g", B0, 1)] and h["at_least_once"] == ("p-",)


def test_the_schedule_is_seeded_and_starts_with_every_kind():
    import itertools
    import random

    from tests.helpers.jepsen.runner import (PAUSE_S, SKEW_MS, fault_kinds, fault_schedule)

    for kind in ("file", "s3"):
        kinds = fault_kinds(kind)
        steps = list(itertools.islice(fault_schedule(random.Random(7), kind, 3), 40))
        again = list(itertools.islice(fault_schedule(random.Random(7), kind, 3), 40))
        assert steps == again
        assert {s.kind for s in steps[:len(kinds)]} == set(kinds)
        assert all(s.first for s in steps[:len(kinds)]) and not any(s.first for s in steps[len(kinds):])
        for s in steps:
            if s.kind == "sigstop":
                assert PAUSE_S[0] <= s.params["seconds"] <= PAUSE_S[1]
            if s.kind == "skew-restart":
                assert SKEW_MS[0] <= abs(s.params["skew_ms"]) <= SKEW_MS[1]
    assert set(fault_kinds("s3")) > set(fault_kinds("file")) >= {"sigkill", "sigstop", "skew-restart"}


# -- the short deterministic schedule ------------------------------------------------------------
def test_duplicates_of_a_non_idempotent_producer_are_resends_not_anomalies():
    """Kafka promises a producer without idempotence at-least-once: a batch whose answer
    was lost (a broker killed after its commit) is sent again. Only duplicates of values
    whose producer was promised exactly-once count."""
    from tests.helpers.jepsen.checker import count_resent

    log = {0: [(0, "plain-1"), (1, "plain-1"), (2, "idem-1"), (3, "idem-1"), (4, "idem-2")]}
    h = {"acked": ["plain-1", "idem-1", "idem-2"], "final_committed": log, "final_uncommitted": log,
         "at_least_once": ("plain-",)}
    assert check(h)["duplicated"] == 1
    assert count_resent(log, ("plain-",)) == 1


def _short_run(tmp_path, root_kind: str, seconds: float):
    from tests.helpers.jepsen.runner import RunOptions, fault_kinds, run_cluster
    from tests.helpers.jepsen.workloads import default_workloads

    # Pauses of 11-12 s: past the consumers' 6 s session and the 10 s transaction timeout
    # (which the short S3 schedule keeps too: the long S3 run's 60 s would make its pause
    # shorter than the timeout, and its final wait longer).
    opts = RunOptions(root_kind=root_kind, seconds=seconds, seed=1, brokers=2,
                      skewed_start_ms=75_000, fault_gap_s=(0.5, 1.5), pause_s=(11.0, 12.0),
                      workdir=str(tmp_path / "jepsen"), workloads=default_workloads(1))
    counts, extra = run_cluster(opts, log=lambda m: None)
    print(format_table(counts, extra))
    assert extra["records-acked"] > 0
    assert all(extra[f"fault-{k}"] >= 1 for k in fault_kinds(root_kind)), extra
    assert set(ANOMALIES) <= set(counts) and not any(counts.values()), counts
    return extra


def test_the_short_schedule_finds_no_anomaly(tmp_path):
    """Two serve processes on file:// (one with its clock 75 s ahead), the workloads with
    real clients, and every fault kind of file:// on a fixed seed (SIGKILL, SIGSTOP past
    the session and transaction timeouts, a restart with a skewed clock): every anomaly
    count is 0."""
    _short_run(tmp_path, "file", 15)


def test_the_short_s3_schedule_finds_no_anomaly(tmp_path):
    """The same on an S3 root (moto on loopback) through the fault proxy, adding lost
    responses, 5xx storms and latency: every anomaly count is 0."""
    extra = _short_run(tmp_path, "s3", 15)
    assert extra["s3-requests-lose"] + extra["s3-requests-storm"] + extra["s3-requests-latency"] > 0


def test_duplicates_are_split_by_who_wrote_the_copies(tmp_path):
    """A value stored under two epochs of one producer id was sent again by the client after
    an epoch bump (what Kafka's broker stores too); stored twice under one epoch, or without
    a producer id, is the broker's duplicate."""
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.format.record_batch import Record
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from tests.helpers.jepsen.runner import duplicate_batches, final_read

    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, "d", 1)
    rec = lambda v: Record(0, 0, None, v.encode(), ())   # noqa: E731
    b = Broker(storage)
    b.append_batch("d", 0, [rec("bumped")], producer_id=5, producer_epoch=1, base_sequence=0)
    b.append_batch("d", 0, [rec("bumped")], producer_id=5, producer_epoch=2, base_sequence=0)
    b.send("d", b"plain", partition=0)
    b.send("d", b"plain", partition=0)
    b.flush()
    final = final_read(storage, {"d": 1})["read_uncommitted"]
    broker, client, lines = duplicate_batches(storage, final, at_least_once=())
    assert (broker, client) == (1, 1), lines
    assert any("bumped (client, epoch bump)" in line for line in lines)
    assert any("plain (BROKER)" in line for line in lines)


def test_client_outcomes_are_stamped_with_wall_time_for_matching_with_broker_logs(tmp_path):
    """Every ack, transaction outcome and client error is kept with the wall time the client
    saw it (and the error's text, which names the broker when librdkafka does), and the run
    writes them in time order to events.txt."""
    import time

    from tests.helpers.jepsen.runner import write_events
    from tests.helpers.jepsen.workloads import EosWorkload

    w = EosWorkload(seed=1)
    before = time.time()
    w._ack("v-1")
    w._error("ck-eos:abort:_FENCED", detail="127.0.0.1:4242/1: fenced")
    w._record_txn("aborted", "eos-ck-eos-0-7", {("je-out", 0): ["x"]})
    events = w.events()
    assert [e[1:] for e in events] == [("ack", "v-1", ""),
                                       ("error", "ck-eos:abort:_FENCED", "127.0.0.1:4242/1: fenced"),
                                       ("txn-aborted", "eos-ck-eos-0-7", "")]
    assert all(before <= e[0] <= time.time() for e in events)
    assert [e[0] for e in events] == sorted(e[0] for e in events)
    n = write_events(str(tmp_path / "events.txt"), [w])
    lines = (tmp_path / "events.txt").read_text().splitlines()
    assert n == 3 and lines[2].endswith("eos txn-aborted eos-ck-eos-0-7")
    assert "127.0.0.1:4242/1: fenced" in lines[1]


def test_s3_runs_give_transactional_clients_kafkas_default_timeout():
    """On S3 the transactional clients get 60 s (the proxy's latency spells outlast 10 s, and
    transactions barely committed); on file:// they keep 10 s, below the pauses, so a paused
    coordinator outlives its transactions. The final wait covers the longer timeout."""
    from tests.helpers.jepsen.runner import load_workloads
    from tests.helpers.jepsen.workloads import EosWorkload, TxnWorkload

    for kind, want in (("s3", 60_000), ("file", 10_000)):
        txn = [w for w in load_workloads(1, kind) if isinstance(w, (TxnWorkload, EosWorkload))]
        assert len(txn) == 2 and {w.txn_timeout_ms for w in txn} == {want}
        assert {w.txn_timeout_s for w in txn} == {want / 1000}
