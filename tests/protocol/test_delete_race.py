"""DeleteTopics through broker A while broker B keeps producing (two brokers
on one root). B acknowledged writes after the delete and the re-created topic listed files the
delete had removed. Now every write B acknowledged is below the deletion tombstone (gone with
the topic), writes after it are refused, and the re-created topic starts empty and verifies."""
from __future__ import annotations

import threading
import time

from kafkastore.cli.entry import main
from kafkastore.manifest import ManifestStore
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, topic_exists

from tests.helpers.wire_requests import batch, produce
from .wire import Wire


def test_delete_through_one_broker_while_another_produces(module_root, storage):
    from confluent_kafka.admin import AdminClient, NewTopic

    create_topic(storage, "dt", 2)
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=200)
    with BrokerThread(Storage(module_root), opts) as a, BrokerThread(Storage(module_root), opts) as b:
        results: list[tuple[int, int, int, float]] = []   # (partition, error, offset, answered)
        stop = threading.Event()

        def hammer():
            w = Wire(b.bootstrap)
            i = 0
            while not stop.is_set():
                p = i % 2
                err, off = produce(w, "dt", p, batch([b"x%d" % i]))
                results.append((p, err, off, time.monotonic()))
                i += 1
            w.close()

        t = threading.Thread(target=hammer)
        t.start()
        deadline = time.time() + 30
        while sum(1 for r in results if r[1] == 0) < 20 and time.time() < deadline:
            time.sleep(0.01)
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.delete_topics(["dt"], operation_timeout=10)["dt"].result(15)
        deleted_at = time.monotonic()
        time.sleep(1.0)  # B keeps producing against its cached metadata
        stop.set()
        t.join(30)
        assert not topic_exists(storage, "dt")
        tomb = {p: ManifestStore(storage, "dt", p).latest() for p in (0, 1)}
        assert all(m.extra.get("deleted") and not m.segments for m in tomb.values())
        acked = [(p, off) for p, err, off, _ in results if err == 0]
        assert len(acked) >= 20
        # every acknowledged write is below where the tombstone cut the log: gone with the topic
        assert all(off < tomb[p].log_start_offset for p, off in acked)
        after = [err for _, err, _, at in results if at > deleted_at]
        assert after and all(err != 0 for err in after)

        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("dt", 2, 1)])["dt"].result(15)
        w = Wire(b.bootstrap)
        for _ in range(100):  # B learns of the new topic within its metadata cache's TTL
            err, off = produce(w, "dt", 0, batch([b"new"]))
            if err != 3:  # UNKNOWN_TOPIC_OR_PARTITION: a client retries it
                break
            time.sleep(0.1)
        w.close()
        assert err == 0 and off == tomb[0].high_watermark   # offsets continue, never reused
    r = PartitionReader(storage, "dt", 0)
    assert r.read(r.log_start_offset).column("value").to_pylist() == [b"new"]
    r1 = PartitionReader(storage, "dt", 1)
    assert r1.log_start_offset == r1.high_watermark == tomb[1].high_watermark
    assert main(["--root", module_root, "verify", "dt"]) == 0
