"""Made-up topic names never become metric labels: a Produce to topics that do not exist is
counted apart, without its topic, and its bytes are not bytes in."""
from __future__ import annotations

import datetime
import urllib.request
import uuid

from kio.schema.produce.v9 import request as prod_req

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.wire_requests import batch
from tests.protocol.wire import Wire


def _scrape(broker) -> str:
    port = broker.server.metrics_port
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def test_made_up_topic_names_do_not_grow_the_scrape(tmp_path):
    root = f"file://{tmp_path}"
    real = f"real-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), real, 1)
    opts = ServeOptions(port=0, commit_interval_ms=2, metrics_listen=("127.0.0.1", 0))
    with BrokerThread(Storage(root), opts) as broker:
        data = batch([b"v" * 50])
        w = Wire(broker.bootstrap, timeout=30)
        ok = prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
            prod_req.TopicProduceData(name=real, partition_data=(
                prod_req.PartitionProduceData(index=0, records=data),)),))
        w.call(ok)
        before = _scrape(broker)
        names = [f"madeup-{i}-{uuid.uuid4().hex[:8]}" for i in range(2000)]
        for start in range(0, len(names), 200):
            w.call(prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10),
                                           topic_data=tuple(
                prod_req.TopicProduceData(name=n, partition_data=(
                    prod_req.PartitionProduceData(index=0, records=data),))
                for n in names[start:start + 200])))
        after = _scrape(broker)
        w.close()
    assert not any(n in after for n in names)
    assert real in after
    assert len(after) < len(before) + 2000   # a few counters moved, no label set per name
    assert "kafkastore_refused_produce_partitions_total" in after
