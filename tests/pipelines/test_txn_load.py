"""A load of a topic a real transactional producer wrote through `kafkastore serve`: committed,
aborted and open transactions (the load never passes the open one nor loads aborted records)."""
from __future__ import annotations

import uuid

import pytest

from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.warehouse.catalog import Warehouse
from pipelines.jobs.load import run_load
from tests.helpers.txn import txn_producer

ck = pytest.importorskip("confluent_kafka")


def test_load_of_committed_aborted_and_open_transactions(spark, tmp_path):
    from kafkastore.protocol.server import BrokerThread, ServeOptions

    root = f"file://{tmp_path}/log"
    storage = Storage(root)
    create_topic(storage, "t", 1)
    wh = Warehouse(f"file://{tmp_path}/wh")
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=2)) as b:
        p = txn_producer(b.bootstrap, "tx-load-" + uuid.uuid4().hex[:6])
        for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
            p.begin_transaction()
            for v in values:
                p.produce("t", v, partition=0)
            p.flush(10)
            p.commit_transaction(15) if commit else p.abort_transaction(15)
        p.begin_transaction()
        p.produce("t", b"open", partition=0)
        p.flush(10)
        plain = ck.Producer({"bootstrap.servers": b.bootstrap})
        plain.produce("t", b"after-open", partition=0)  # behind the open transaction
        plain.flush(10)
        first = run_load(spark, root=root, topic="t", warehouse=wh, table="tx", progress=False)
        rows = sorted((r["offset"], r["value"]) for r in wh.table("tx").scan().to_arrow().to_pylist())
        assert [v for _, v in rows] == [b"c1", b"c2", b"c3"]        # no aborted record, nothing past the open one
        open_at = max(o for o, _ in rows) + 2                        # c3, its marker, then the open transaction
        assert first.ranges == {0: (0, open_at)}
        p.commit_transaction(15)
        second = run_load(spark, root=root, topic="t", warehouse=wh, table="tx", progress=False)
        assert second.rows == 2 and second.ranges[0][0] == open_at
        rows = sorted((r["offset"], r["value"]) for r in wh.table("tx").scan().to_arrow().to_pylist())
        assert [v for _, v in rows] == [b"c1", b"c2", b"c3", b"open", b"after-open"]
