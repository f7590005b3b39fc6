"""Real consumers through two ``kafkastore serve`` processes while the group's coordinator is
paused (SIGSTOP) for longer than the liveness window: committed offsets never go backwards
and no consumer is told an offset older than a commit that was acknowledged."""
from __future__ import annotations

import signal

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.groups.offsets import (OFFSETS_TOPIC, OffsetKey, decode_key, decode_offset_value,
                                       partition_for_group)
from kafkastore.protocol.apis.groups import coordinator_node
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, load_topic
from tests.helpers.serve_procs import start_serve, stop_serve, wait_until_listed

TOPIC = "pq"
RECORDS = 300
#: Commit refusals that mean "rejoin" (Kafka's answers to a member its coordinator dropped).
_REJOIN = (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
           KafkaError.REBALANCE_IN_PROGRESS)


def _consume_and_commit(bootstrap: str, group: str, count: int) -> tuple[int, int]:
    """Consume ``count`` records of the group's partition, committing each synchronously;
    returns (first offset received, last acknowledged commit)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000})
    first, acked = None, None
    try:
        c.subscribe([TOPIC])
        got = 0
        while got < count:
            msg = c.poll(1.0)
            if msg is None or msg.error():
                continue
            first = msg.offset() if first is None else first
            got += 1
            try:
                c.commit(offsets=[TopicPartition(TOPIC, 0, msg.offset() + 1)], asynchronous=False)
            except KafkaException as exc:
                # A definite refusal while the group moves between coordinators (the member
                # rejoins and is served from the last acknowledged commit): not acknowledged.
                if exc.args[0].code() not in _REJOIN:
                    raise
                continue
            acked = msg.offset() + 1
    finally:
        c.close()
    return first, acked


def _consume_and_commit_kafka_python(bootstrap: str, group: str, count: int) -> tuple[int, int]:
    """:func:`_consume_and_commit` with kafka-python's consumer."""
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.errors import CommitFailedError
    from kafka.structs import TopicPartition as KTP

    c = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000,
                      request_timeout_ms=10000)
    first, acked, got = None, None, 0
    try:
        while got < count:
            for records in c.poll(timeout_ms=1000, max_records=count - got).values():
                for msg in records:
                    first = msg.offset if first is None else first
                    got += 1
                    try:
                        c.commit({KTP(TOPIC, 0): OffsetAndMetadata(msg.offset + 1, "", -1)})
                    except CommitFailedError:   # the member rejoins, as above
                        continue
                    acked = msg.offset + 1
    finally:
        c.close()
    return first, acked


def _committed_history(root: str, group: str) -> list[int]:
    """Every offset committed for the group's partition 0, in log order."""
    storage = Storage(root)
    p = partition_for_group(group, load_topic(storage, OFFSETS_TOPIC).partitions)
    table = PartitionReader(storage, OFFSETS_TOPIC, p).read(0, include_headers=False)
    out = []
    for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        key = decode_key(k)
        if isinstance(key, OffsetKey) and key.group == group and key.topic == TOPIC and v is not None:
            out.append(decode_offset_value(v).offset)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("resumed_client", ["confluent-kafka", "kafka-python"])
def test_consumers_never_restart_behind_an_acknowledged_commit_after_a_pause(tmp_path, resumed_client):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, TOPIC, 1)
    b = Broker(storage)
    for i in range(RECORDS):
        b.send(TOPIC, b"r%d" % i, partition=0)
    b.flush()
    a, other = start_serve(root, node_id=0), start_serve(root, node_id=1)
    try:
        wait_until_listed([a.bootstrap, other.bootstrap])
        ports = {0: int(a.bootstrap.rsplit(":", 1)[1]), 1: int(other.bootstrap.rsplit(":", 1)[1])}
        group = next(g for g in (f"pq-{i}" for i in range(1000))
                     if coordinator_node(g, [(n, "127.0.0.1", p) for n, p in ports.items()])[0] == 0)
        _, acked = _consume_and_commit(a.bootstrap, group, 40)          # coordinated by a
        a.send_signal(signal.SIGSTOP)
        try:
            first, acked = _consume_and_commit(other.bootstrap, group, 60)   # b takes the group over
            assert first == 40
        finally:
            a.send_signal(signal.SIGCONT)
        # a is back, believes it still holds the group as loaded before the pause
        consume = (_consume_and_commit if resumed_client == "confluent-kafka"
                   else _consume_and_commit_kafka_python)
        first, acked2 = consume(a.bootstrap, group, 30)
        assert first == acked, f"restarted from {first}, behind the acknowledged commit {acked}"
        c = Consumer({"bootstrap.servers": f"{a.bootstrap},{other.bootstrap}", "group.id": group})
        try:
            committed = c.committed([TopicPartition(TOPIC, 0)], timeout=20)[0].offset
        finally:
            c.close()
        assert committed == acked2
        history = _committed_history(root, group)
        assert history == sorted(history), f"committed offsets went backwards: {history}"
    finally:
        for p in (a, other):
            stop_serve(p)
