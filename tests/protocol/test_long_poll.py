"""Parked long-poll fetches cost nothing until data arrives."""
from __future__ import annotations

import datetime
import threading
import time

from kio.schema.fetch.v12 import request as fetch_req

from kafkastore.protocol.wire import codec
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire
from tests.helpers.wire_requests import batch, produce

PARKED = 300
PER_CONNECTION = 60  # under the broker's in-flight limit per connection


def _fetch_request(topic: str, offset: int, wait_ms: int):
    return fetch_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, isolation_level=0,
        topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())


def _broker_threads(b: BrokerThread) -> list[threading.Thread]:
    """The broker's event-loop thread and its I/O pool: where a parked fetch would spend."""
    return [b._thread, *b.server.pool._threads]


def _cpu_seconds(threads: list[threading.Thread]) -> float:
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident))
               for t in threads if t.is_alive())


def test_parked_fetches_use_no_cpu_and_wake_on_produce(module_root, storage):
    create_topic(storage, "parked", 1)
    with BrokerThread(Storage(module_root), ServeOptions(port=0, commit_interval_ms=2,
                                                         heartbeat_ms=1000)) as b:
        conns = [Wire(b.bootstrap, timeout=20) for _ in range(PARKED // PER_CONNECTION)]
        for w in conns:
            for _ in range(PER_CONNECTION):
                w.send(_fetch_request("parked", 0, 15_000))
        deadline = time.monotonic() + 10
        while b.server.data_watch.waiting() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # every fetch read once and parked
        # The broker's own threads, not the process: this process also runs moto and other
        # tests' background gc, whose work is not the parked fetches'.
        threads = _broker_threads(b)
        cpu0, wall0 = _cpu_seconds(threads), time.monotonic()
        time.sleep(3)
        cpu = (_cpu_seconds(threads) - cpu0) / (time.monotonic() - wall0)
        # A bound that catches polling per parked fetch (300 of them spinning or re-reading
        # would take most of a core), not a measure of efficiency: the broker's background
        # threads (heartbeat, document refreshers, housekeeping of the module's root) use a
        # few percent on their own, more on a loaded CI machine (7.7% seen in a full run).
        assert cpu < 0.25, f"{PARKED} parked fetches used {cpu:.1%} of a core"
        # A produce wakes every one of them promptly.
        producer = Wire(b.bootstrap)
        started = time.monotonic()
        assert produce(producer, "parked", 0, batch([b"wake"])) == (0, 0)
        for w in conns:
            for _ in range(PER_CONNECTION):
                frame = w.recv_frame()
                _, r = codec.decode_response(frame, 1, 12)
                assert r.responses[0].partitions[0].records  # the new batch, not an empty timeout
        assert time.monotonic() - started < 2
        for w in conns + [producer]:
            w.close()


def test_another_brokers_commit_wakes_a_parked_fetch(module_root, storage):
    """Broker B's commit is seen by A's shared poll of the manifest head."""
    create_topic(storage, "polled", 1)
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=1000, fetch_poll_ms=100)
    with BrokerThread(Storage(module_root), opts) as a, BrokerThread(Storage(module_root), opts) as b:
        waiter = Wire(a.bootstrap, timeout=20)
        waiter.send(_fetch_request("polled", 0, 10_000))
        time.sleep(0.5)
        started = time.monotonic()
        w = Wire(b.bootstrap)
        assert produce(w, "polled", 0, batch([b"elsewhere"])) == (0, 0)
        _, r = codec.decode_response(waiter.recv_frame(), 1, 12)
        assert r.responses[0].partitions[0].records
        assert time.monotonic() - started < 3
        waiter.close()
        w.close()
