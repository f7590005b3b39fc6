"""`kafkastore serve` merges what it writes: a trickle of acks=all produce commits ends with a
bounded number of live segments, and clients fetch every record across merged segments."""
from __future__ import annotations

import pytest

from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import housekeeper_for
from kafkastore.maintenance.merge import DEFAULT_MIN_SEGMENTS
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.kafka_clients import confluent_consume

pytest.importorskip("confluent_kafka")


def test_serve_merges_a_trickle_of_small_commits(tmp_path):
    from confluent_kafka import Producer

    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, "trickle", 1)
    n = 3 * DEFAULT_MIN_SEGMENTS
    with BrokerThread(storage, ServeOptions(port=0, commit_interval_ms=0, heartbeat_ms=500)) as b:
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 0})
        for i in range(n):
            p.produce("trickle", value=b"r%03d" % i, partition=0)
            p.flush(10)                       # one acknowledged commit per record
        hk = housekeeper_for(storage)
        hk.wait()
        m = ManifestStore(storage, "trickle", 0).latest()
        assert m.high_watermark == n
        assert len(m.segments) < DEFAULT_MIN_SEGMENTS + 4, [s.segment_id for s in m.segments]
        assert any(s.segment_id.startswith("m") for s in m.segments)   # merged ones
        assert not hk.errors
        got = confluent_consume(b.bootstrap, "trickle", 1, n)
        assert [(off, value) for _, off, _, value in got] == [(i, b"r%03d" % i) for i in range(n)]
