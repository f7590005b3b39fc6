"""Parked long-poll fetches on many partitions cost nothing until data arrives (replayed
with one fetch per partition): the shared poll for other brokers' writes
must not read every waited partition's manifest head four times a second (300 partitions
on S3 kept a serve process at 30% of a core and sent moto a continuous stream of GETs)."""
from __future__ import annotations

import time

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire

PARTITIONS = 300
PER_CONNECTION = 60
#: Manifest-head reads per second the poller may spend, whatever the number of waited partitions.
MAX_HEAD_READS_PER_S = 50


def test_parked_fetches_on_many_partitions_read_a_bounded_number_of_heads(module_root, storage):
    create_topic(storage, "wide", PARTITIONS)
    with BrokerThread(Storage(module_root), ServeOptions(port=0, heartbeat_ms=1000)) as b:
        conns = [Wire(b.bootstrap, timeout=20) for _ in range(PARTITIONS // PER_CONNECTION)]
        for i in range(PARTITIONS):
            conns[i // PER_CONNECTION].send(_partition_fetch("wide", i))
        deadline = time.monotonic() + 10
        while b.server.data_watch.waiting() < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        polls0, t0 = b.server.data_watch.polls, time.monotonic()
        time.sleep(2)
        rate = (b.server.data_watch.polls - polls0) / (time.monotonic() - t0)
        for w in conns:
            w.close()
        assert rate <= MAX_HEAD_READS_PER_S, f"{rate:.0f} manifest-head reads/s for {PARTITIONS} parked fetches"


def _partition_fetch(topic: str, partition: int):
    import datetime

    from kio.schema.fetch.v12 import request as fetch_req

    return fetch_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=20_000), min_bytes=1, isolation_level=0,
        topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
            partition=partition, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())
