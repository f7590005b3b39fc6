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


def test_a_storm_answers_503_without_forwarding(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    fault = proxy.add("storm", methods=("PUT",), path_part="/stormy", status=503)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"x")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    with pytest.raises(botocore.exceptions.ClientError):
        _client(s3_endpoint).head_object(Bucket="kafkastore-test", Key="jepsen/stormy")
    storm_hits = fault.hits
    assert storm_hits >= 1
    proxy.clear()   # the storm is over: the next PUT goes through
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"y")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/stormy")["Body"].read() == b"y"
    assert proxy.counts["storm"] == storm_hits and proxy.counts["forwarded"] >= 2


def test_latency_forwards_after_the_delay(proxy):
    s3 = _client(proxy.endpoint)
    proxy.add("latency", methods=("GET",), path_part="/slow", delay_s=0.2, count=1)
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/slow", Body=b"z")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/slow")["Body"].read() == b"z"
    assert proxy.counts["latency"] == 1


# -- the checker, on hand-made histories -----------------------------------------------------
from tests.helpers.jepsen.checker import ANOMALIES, check, format_table  # noqa: E402


def _clean_history():
    log = {0: [(0, "a"), (1, "b"), (3, "t1-0")], 1: [(0, "t1-1")]}
    return {"acked": ["a", "b"], "committed_txns": {"t1": {0: ["t1-0"], 1: ["t1-1"]}},
            "aborted_txns": {"t2": {0: ["t2-0"]}},
            "final_committed": log,
            "final_uncommitted": {0: [(0, "a"), (1, "b"), (2, "t2-0"), (3, "t1-0")],
                                  1: [(0, "t1-1")]},
            "polls": [("c", 0, 0), ("c", 0, 1), ("c", 0, 3)],
            "commits": [("g", 0, 1), ("g", 0, 2)],
            "lso": {0: 5, 1: 2}, "hwm": {0: 5, 1: 2}, "open_txns": {}, "missing_files": []}


def test_the_checker_counts_nothing_on_a_clean_history():
    # Polling 1 then 3 passes over the aborted record at offset 2: not a skip.
    h = _clean_history()
    assert check(h) == {k: 0 for k in ANOMALIES}


def test_the_checker_counts_each_anomaly():
    h = _clean_history()
    h["acked"].append("never-read")                                     # lost
    h["final_uncommitted"][1].append((1, "t1-1"))                       # duplicated
    h["final_committed"][0].append((2, "t2-0"))                         # aborted-read
    h["final_committed"][1] = []                                        # torn (t1), and t1-1 lost
    h["polls"] = [("c", 0, 0), ("c", 0, 3), ("c", 0, 1),                # skips 1 and 2 (now
                  ("c", 0, None), ("c", 0, 0)]                          # read); back: 1; mark
    h["commits"].append(("g", 0, 1))                                    # regression
    h["lso"][1] = 1                                                     # hanging
    h["missing_files"] = ["t/0/seg-1.kfs"]
    counts = check(h)
    assert counts == {"lost": 2, "duplicated": 1, "aborted-read": 1, "torn": 1, "poll-skip": 2,
                      "nonmonotonic-poll": 1, "committed-offset-regression": 1,
                      "hanging-lso": 1, "missing-file": 1}
    table = format_table(counts, {"records": 4})
    assert table.splitlines()[0].split() == ["records", "4"] and "hanging-lso" in table


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


def test_the_short_schedule_finds_no_anomaly(tmp_path):
    """Two serve processes, a queue workload with real clients, SIGKILL and SIGSTOP faults
    on a fixed seed: every anomaly count is 0."""
    from tests.helpers.jepsen.runner import run

    counts, extra = run(f"file://{tmp_path}/root", 45, seed=1, log=lambda m: None)
    print(format_table(counts, extra))
    assert extra["records-acked"] > 0 and extra["fault-sigkill"] + extra["fault-sigstop"] > 0
    assert counts == {k: 0 for k in ANOMALIES}
