"""What one acknowledged produce commit costs through `kafkastore serve` does not grow with the
partition's history (the serve soak): requests and bytes per commit on the produce
path, counted through bench/counting_fs.py, are the same after hundreds of commits (merges
landing meanwhile) as near the start. Counts, not times: the machine's load cannot move them."""
from __future__ import annotations

import threading

import pytest

from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import housekeeper_for
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.counting import counting_fs

pytest.importorskip("confluent_kafka")


def produce_path_counts(fs):
    """Requests and bytes by kind of every thread except the background housekeeping's
    (merging and gc run beside the produce path and are counted by their own tests)."""
    total_req, total_bytes = {}, {}
    for t in threading.enumerate():
        if t.name.startswith("kafkastore-housekeeping"):
            continue
        c = fs.snapshot(thread=t.ident)
        for k, v in c.requests.items():
            total_req[k] = total_req.get(k, 0) + v
        for k, v in c.bytes.items():
            total_bytes[k] = total_bytes.get(k, 0) + v
    return total_req, total_bytes


def per_commit(after, before, commits):
    return {k: (after.get(k, 0) - before.get(k, 0)) / commits for k in set(after) | set(before)}


def test_requests_and_bytes_per_produce_commit_stay_flat_as_history_grows(tmp_path):
    from confluent_kafka import Producer

    inner = Storage(f"file://{tmp_path}/root")
    create_topic(inner, "soak", 1, {"segment.bytes": 16384})
    fs = counting_fs(inner.fs)
    storage = Storage(inner.url, fs=fs)
    window, gap = 60, 240
    with BrokerThread(storage, ServeOptions(port=0, commit_interval_ms=0, heartbeat_ms=500)) as b:
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 0})
        marks = {}
        n = 0
        for start in (20, 20 + window + gap):
            while n < start:
                p.produce("soak", value=b"v" * 100, partition=0)
                p.flush(10)  # one acknowledged commit per record
                n += 1
            marks[start] = produce_path_counts(fs)
            for _ in range(window):
                p.produce("soak", value=b"v" * 100, partition=0)
                p.flush(10)
                n += 1
            marks[start + window] = produce_path_counts(fs)
        hk = housekeeper_for(storage)
        hk.wait()
        assert not hk.errors
    m = ManifestStore(inner, "soak", 0).latest()
    assert m.high_watermark == n
    assert any(s.segment_id.startswith("m") for s in m.segments)  # merges landed meanwhile
    (a0, a1), (b0, b1) = [(marks[s], marks[s + window]) for s in (20, 20 + window + gap)]
    early_req, late_req = per_commit(a1[0], a0[0], window), per_commit(b1[0], b0[0], window)
    early_bytes, late_bytes = per_commit(a1[1], a0[1], window), per_commit(b1[1], b0[1], window)
    for kind in set(early_req) | set(late_req):
        # A merge that lands between two produce commits costs the next one a read of its
        # version: allow half a request per commit on top.
        assert late_req.get(kind, 0) <= early_req.get(kind, 0) * 1.25 + 0.5, (kind, early_req, late_req)
    print("per produce commit, early:", early_req, early_bytes, "late:", late_req, late_bytes)
    for kind in ("write", "read"):
        assert late_bytes.get(kind, 0) <= early_bytes.get(kind, 0) * 1.25 + 512, (
            kind, early_bytes, late_bytes)
