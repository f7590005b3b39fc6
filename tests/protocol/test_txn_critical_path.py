"""What one transaction waits on before its answers, counted (never timed): the commits a
transaction makes, in order, and what EndTxn does beside its markers rather than after them.

A transaction of confluent-kafka's producer over two partitions, with
``send_offsets_to_transaction``: AddPartitions (one ``__transaction_state`` commit),
AddOffsets (one more), the produce (one commit per partition), EndTxn: the Prepare state
(one commit), then the markers (one commit per partition, side by side) and the offsets
(applied to the group, their pending document deleted) beside the markers. The Complete
state is stored later, and not at all when the producer's next transaction comes first.
"""
from __future__ import annotations

import threading
import uuid

import pytest

from kafkastore.protocol.coordinators import txn_store as S
from kafkastore.protocol.coordinators.pending_offsets import PENDING_DIR
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.txn import consume_values, txn_producer

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture
def own_broker(tmp_path):
    """A broker of its own (the tests hold its appender's marker commits)."""
    b = BrokerThread(Storage(f"file://{tmp_path}/root"),
                     ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500))
    b.start()
    yield b
    b.stop()


def _hold_marker_commits(appender):
    """Make the appender's commits that carry a marker wait for the returned gate; the
    returned event is set once one is waiting."""
    gate, entered = threading.Event(), threading.Event()
    commit = appender.commit

    def held(tp, items):
        if any(i.marker for i in items):
            entered.set()
            assert gate.wait(60), "the test never released the markers"
        return commit(tp, items)

    appender.commit = held
    return gate, entered


def _committed(consumer, topic: str) -> int:
    return consumer.committed([ck.TopicPartition(topic, 0)], 10)[0].offset


def _open_transaction_with_offsets(broker, tmp_path, prefix: str, *, partitions: int,
                                   offset: int):
    """A topic of ``partitions`` partitions, a group's reader (read_uncommitted, no auto
    commit) and a transactional producer whose open transaction holds a record on each
    partition and the group's offset ``offset`` of partition 0, flushed:
    ``(storage, topic, reader, producer)``."""
    storage = Storage(f"file://{tmp_path}/root")
    topic, group = f"{prefix}-{uuid.uuid4().hex[:6]}", f"{prefix}-g-{uuid.uuid4().hex[:6]}"
    create_topic(storage, topic, partitions)
    reader = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    p = txn_producer(broker.bootstrap, f"{prefix}-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    for partition in range(partitions):
        p.produce(topic, b"x%d" % partition, partition=partition)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, offset)],
                                  reader.consumer_group_metadata(), 10)
    p.flush(10)
    return storage, topic, reader, p


def test_a_committed_transactions_offsets_are_applied_while_its_markers_commit(own_broker, tmp_path):
    """EndTxn applied the transaction's offsets (and deleted their pending document) only after
    every marker had committed: one more store round trip after another, on the answer's
    path (about eight on S3). Now they are settled beside the markers: with the markers' commit
    held, the group's offset is already the transaction's."""
    storage, topic, reader, p = _open_transaction_with_offsets(own_broker, tmp_path, "cp",
                                                               partitions=2, offset=7)
    assert _committed(reader, topic) < 0

    gate, entered = _hold_marker_commits(own_broker.server.appender)
    done: list = []
    ender = threading.Thread(target=lambda: done.append(p.commit_transaction(30)))
    ender.start()
    try:
        assert entered.wait(20), "EndTxn never reached its markers"
        seen = -1
        for _ in range(100):   # the offsets' commit runs beside the held markers
            seen = _committed(reader, topic)
            if seen == 7:
                break
            threading.Event().wait(0.1)
        assert seen == 7, "the offsets waited for the markers"
        assert ender.is_alive() and not done   # not answered before its markers
        assert storage.list(f"{PENDING_DIR}/") == []
    finally:
        gate.set()
        ender.join(30)
    assert done == [None]
    assert _committed(reader, topic) == 7
    reader.close()


def test_an_aborted_transactions_offsets_are_dropped_beside_its_markers(own_broker, tmp_path):
    storage, topic, reader, p = _open_transaction_with_offsets(own_broker, tmp_path, "cpa",
                                                               partitions=1, offset=9)
    assert storage.list(f"{PENDING_DIR}/") != []
    p.abort_transaction(30)
    assert storage.list(f"{PENDING_DIR}/") == []
    assert _committed(reader, topic) < 0
    reader.close()


def test_one_transaction_makes_these_commits(own_broker, tmp_path, monkeypatch):
    """The count of fsync'd commits of one transaction over two partitions with offsets, when
    the producer's next transaction follows at once: 3 state commits (AddPartitions,
    AddOffsets, Prepare; Complete is superseded by the next AddPartitions), 2 data commits,
    2 marker commits and 1 offsets commit. A guard: it held before the offsets moved too."""
    storage = Storage(f"file://{tmp_path}/root")
    topic, group = "cpc-" + uuid.uuid4().hex[:6], "cpc-g-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 2)
    state_commits: list = []
    write_group = S.TxnStore._write_group

    def counted(self, p, puts):
        state_commits.append(sorted(x.meta.state.name for x in puts))
        return write_group(self, p, puts)

    monkeypatch.setattr(S.TxnStore, "_write_group", counted)
    reader = ck.Consumer({"bootstrap.servers": own_broker.bootstrap, "group.id": group,
                          "enable.auto.commit": False})
    p = txn_producer(own_broker.bootstrap, "cpc-" + uuid.uuid4().hex[:6])
    appender = own_broker.server.appender

    def one(n: int) -> tuple[list, int]:
        state_commits.clear()
        before = appender.commits
        p.begin_transaction()
        p.produce(topic, b"x", partition=0)
        p.produce(topic, b"y", partition=1)
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, n)], reader.consumer_group_metadata(), 10)
        p.commit_transaction(30)
        return list(state_commits), appender.commits - before

    one(1)
    states, partition_commits = one(2)
    assert states == [["ONGOING"], ["ONGOING"], ["PREPARE_COMMIT"]]
    # 2 data + 2 markers; the group's offsets go through the group coordinator's own writer.
    assert partition_commits == 4
    assert _committed(reader, topic) == 2
    reader.close()


def test_a_transactions_batches_and_markers_skip_the_group_commit_linger(tmp_path):
    """A partition's commit waits ``commit_interval_ms`` for more appends (group commit), but
    not when it holds a transaction's batch or marker: the transaction's end waits on each of
    them, so the linger was added to every transaction once per stage. With a ten-minute
    linger, the old code never acknowledged the transaction's batches within the commit's
    30 s; now the transaction commits and reads back."""
    root = f"file://{tmp_path}/root"
    topic = "cpl-" + uuid.uuid4().hex[:6]
    create_topic(Storage(root), topic, 2)
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=600_000,
                                                  heartbeat_ms=500)) as b:
        p = txn_producer(b.bootstrap, "cpl-" + uuid.uuid4().hex[:6])
        p.begin_transaction()
        p.produce(topic, b"x", partition=0)
        p.produce(topic, b"y", partition=1)
        p.commit_transaction(30)
        before = b.server.appender.commits
        p.begin_transaction()
        p.produce(topic, b"z", partition=0)
        p.commit_transaction(30)
        assert b.server.appender.commits - before == 2   # its batch, then its marker
        assert sorted(consume_values(b.bootstrap, topic, 2, "read_committed", expect=3)) == [
            b"x", b"y", b"z"]
