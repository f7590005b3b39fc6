"""A read_committed consumer never reads the group offsets from before a transaction that
has not ended (KIP-447): OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT
for the partitions an open transaction sent offsets for, and the offsets it committed once
it ends. The fault harness's exactly-once pipeline rewound after a commit whose answer it
never got, read the offsets from before it while it was still completing, and processed
the same input twice (eos-duplicate, committed-offset-regression)."""
from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7 import request as of_req

from kafkastore.protocol.coordinators.pending_offsets import add_pending_offsets, take_pending_offsets
from kafkastore.protocol.coordinators.pending_offsets import unstable_partitions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.protocol.wire import Wire


def _fetch(bootstrap: str, group: str, topic: str, stable: bool):
    w = Wire(bootstrap)
    try:
        resp = w.call(of_req.OffsetFetchRequest(
            group_id=group, require_stable=stable,
            topics=(of_req.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),)))
    finally:
        w.close()
    (part,) = resp.topics[0].partitions
    return part.error_code, part.committed_offset


def _open_transaction(broker, storage, committed: int, sent: int, *, produce: bool):
    """A group with ``committed`` stored for partition 0 of a new topic, and an open
    transaction that sent ``sent`` for it: ``(topic, group, consumer, producer)``."""
    topic, group = f"in-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(storage, topic, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{group}"})
    p.init_transactions(30)
    p.begin_transaction()
    if produce:
        p.produce(topic, b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition(topic, 0, sent)], c.consumer_group_metadata(), 30)
    return topic, group, c, p


def test_offsets_of_an_open_transaction_are_unstable_until_it_ends(broker, storage):
    topic, group, c, p = _open_transaction(broker, storage, 5, 9, produce=True)
    try:
        # The offset beside the error is the last stable one, not -1: librdkafka starts a
        # partition at it when the answer arrives after its assignment changed, and -1 would
        # send it back to auto.offset.reset (the start of the log).
        assert _fetch(broker.bootstrap, group, topic, stable=True) == (
            ErrorCode.unstable_offset_commit, 5)
        # A consumer that does not ask for stable offsets reads the last committed ones.
        assert _fetch(broker.bootstrap, group, topic, stable=False) == (ErrorCode.none, 5)
        p.commit_transaction(30)
        assert _fetch(broker.bootstrap, group, topic, stable=True) == (ErrorCode.none, 9)
    finally:
        c.close()


def test_an_aborted_transaction_leaves_the_offsets_stable_and_unchanged(broker, storage):
    topic, group, c, p = _open_transaction(broker, storage, 3, 7, produce=False)
    p.abort_transaction(30)
    try:
        assert _fetch(broker.bootstrap, group, topic, stable=True) == (ErrorCode.none, 3)
    finally:
        c.close()


def test_a_document_older_than_the_longest_transaction_is_not_unstable(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    add_pending_offsets(storage, 7, 0, "g", {("in", 0): (10, -1, "")}, txn_start_ms=1_000)
    add_pending_offsets(storage, 8, 0, "other", {("in", 1): (10, -1, "")}, txn_start_ms=1_000)
    assert unstable_partitions(storage, "g", now_ms=2_000, open_for_ms=60_000) == {("in", 0)}
    # left by a coordinator that lost its state: it must not hold the group for ever
    assert unstable_partitions(storage, "g", now_ms=70_000, open_for_ms=60_000) == set()


def test_a_later_transaction_of_the_epoch_settles_a_document_an_earlier_one_left(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    add_pending_offsets(storage, 7, 2, "g", {("in", 0): (10, -1, "")}, txn_start_ms=1_000)
    # the next transaction of the producer (same epoch, later start) writes another group's
    add_pending_offsets(storage, 7, 2, "h", {("in", 0): (12, -1, "")}, txn_start_ms=2_000)
    taken = {group: offsets for _p, group, offsets in take_pending_offsets(storage, 7, 2, 2_000)}
    assert taken == {"g": {}, "h": {("in", 0): (12, -1, "")}}
