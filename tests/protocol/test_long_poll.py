"""Parked long-poll fetches cost nothing until data arrives: counted, not timed."""
from __future__ import annotations

import datetime
import threading
import time

from kio.schema.fetch.v12 import request as fetch_req

from kafkastore.protocol.apis import fetch as fetch_api
from kafkastore.protocol.wire import codec
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire
from tests.helpers.counting import count_under, counting_fs
from tests.helpers.wire_requests import batch, produce

PARKED = 300
PER_CONNECTION = 60  # under the broker's in-flight limit per connection
HEARTBEATS = 3       # the window the parked fetches are counted in: ~3 s at heartbeat_ms=1000


def _fetch_request(topic: str, offset: int, wait_ms: int):
    return fetch_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, isolation_level=0,
        topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())


def _count_fetch_reads(monkeypatch) -> list[int]:
    """Count the fetch handler's reads of its partitions (one per fetch, and one more per
    wake-up): ``[n]``, kept up to date."""
    reads = [0]
    lock = threading.Lock()   # the reads run on the broker's I/O threads, side by side
    read_all = fetch_api._read_all

    def counted(*args):
        with lock:
            reads[0] += 1
        return read_all(*args)

    monkeypatch.setattr(fetch_api, "_read_all", counted)
    return reads


def _until(check, what: str, guard_s: float = 30.0) -> None:
    """Wait for ``check()`` (a liveness guard, not a time bound: the guard only ends a hang)."""
    deadline = time.monotonic() + guard_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_parked_fetches_cost_no_reads_and_wake_on_produce(module_root, storage, monkeypatch):
    """While 300 fetches are parked on one partition, none is woken and the partition is read
    only by the shared poll (one head read a round, however many fetches wait). Polling per
    parked fetch (each re-reading the head, or re-running its read, every interval) fails
    the counts whatever the machine's load: the window is a number of the broker's
    heartbeats (registration writes), not a time."""
    create_topic(storage, "parked", 1)
    fs = counting_fs(Storage(module_root).fs)
    topic_requests = count_under(fs, "/parked/")
    registrations = count_under(fs, "/_brokers/")
    fetch_reads = _count_fetch_reads(monkeypatch)
    with BrokerThread(Storage(module_root, fs=fs), ServeOptions(port=0, commit_interval_ms=2,
                                                                heartbeat_ms=1000)) as b:
        conns = [Wire(b.bootstrap, timeout=20) for _ in range(PARKED // PER_CONNECTION)]
        for w in conns:
            for _ in range(PER_CONNECTION):
                w.send(_fetch_request("parked", 0, 15_000))
        _until(lambda: fetch_reads[0] >= PARKED, "every fetch's first read")
        beats = registrations["write"] + 1    # one heartbeat on: every fetch is parked
        _until(lambda: registrations["write"] >= beats, "a heartbeat")
        reads0, requests0 = fetch_reads[0], sum(topic_requests.values())
        beats = registrations["write"] + HEARTBEATS
        _until(lambda: registrations["write"] >= beats, f"{HEARTBEATS} heartbeats")
        woken = fetch_reads[0] - reads0
        requests = sum(topic_requests.values()) - requests0
        assert woken == 0, f"{woken} wake-ups of {PARKED} parked fetches in {HEARTBEATS} heartbeats"
        # Per-fetch polling reads the partition at least once per parked fetch in the window.
        assert requests < PARKED, (f"{requests} store requests for the partition in "
                                   f"{HEARTBEATS} heartbeats with {PARKED} parked fetches")
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
