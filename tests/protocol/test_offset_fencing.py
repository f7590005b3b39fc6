"""What an offset commit is conditional on, as Kafka's GroupCoordinator decides it: the
member and generation of the group's current state (OffsetCommit and TxnOffsetCommit
alike), and OffsetFetch answers what the log holds, whoever wrote it (a transaction's
offsets are written by the transaction's coordinator, maybe another broker)."""
from __future__ import annotations

import datetime
import uuid

import pytest

from kafkastore.groups.offsets import (DEFAULT_OFFSETS_PARTITIONS, OffsetAndMetadata, OffsetsStore,
                                       partition_for_group)
from kafkastore.protocol.coordinators import group as G
from kafkastore.protocol.wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, INVALID_TXN_STATE,
                                                  UNSTABLE_OFFSET_COMMIT)
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.group_requests import code as _code, offset_commit as commit, offset_fetch as fetch
from tests.helpers.group_requests import part as _nested, req as _req
from .wire import Wire


@pytest.fixture
def root(tmp_path):
    root = f"file://{tmp_path}"
    create_topic(Storage(root), "gt", 2)
    return root


@pytest.fixture
def broker(root):
    with BrokerThread(Storage(root), ServeOptions(port=0, heartbeat_ms=300)) as b:
        yield b


def _join(w: Wire, group: str) -> tuple[str, int]:
    """One member joins ``group`` and syncs (JoinGroup v5 / SyncGroup v3): its id and generation."""
    from kafkastore.groups.offsets import encode_consumer_subscription

    def join(member_id: str):
        return w.call(_req(11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=30),
                           rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id,
                           group_instance_id=None, protocol_type="consumer", protocols=(
                               _nested(11, 5, "JoinGroupRequestProtocol", name="range",
                                       metadata=encode_consumer_subscription(["gt"])),)))
    r = join("")
    if int(r.error_code) == G.MEMBER_ID_REQUIRED:
        r = join(r.member_id)
    assert int(r.error_code) == 0
    s = w.call(_req(14, 3, group_id=group, generation_id=r.generation_id, member_id=r.member_id,
                    group_instance_id=None, assignments=(
                        _nested(14, 3, "SyncGroupRequestAssignment", member_id=r.member_id,
                                assignment=b""),)))
    assert int(s.error_code) == 0
    return r.member_id, r.generation_id


def _txn_offset_commit(w: Wire, group: str, generation: int, member: str, offset: int,
                       instance: str | None = None, added_group: str | None = None) -> int:
    """A transaction (InitProducerId, AddOffsetsToTxn of ``added_group``, by default
    ``group``) whose TxnOffsetCommit v3 carries ``generation`` and ``member``; the
    partition's error code (the transaction is aborted)."""
    import time

    tid = "tx-" + uuid.uuid4().hex[:8]
    for _ in range(120):   # as clients do: again while the coordinator loads (a loaded machine)
        init = w.call(_req(22, 4, transactional_id=tid,
                           transaction_timeout=datetime.timedelta(seconds=30),
                           producer_id=-1, producer_epoch=-1))
        if int(init.error_code) not in (COORDINATOR_LOAD_IN_PROGRESS, G.COORDINATOR_NOT_AVAILABLE):
            break
        time.sleep(0.5)
    assert int(init.error_code) == 0
    pid, epoch = init.producer_id, init.producer_epoch
    assert int(w.call(_req(25, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                           group_id=added_group or group)).error_code) == 0
    r = w.call(_req(28, 3, transactional_id=tid, group_id=group, producer_id=pid,
                    producer_epoch=epoch, generation_id=generation, member_id=member,
                    group_instance_id=instance, topics=(
                        _nested(28, 3, "TxnOffsetCommitRequestTopic", name="gt", partitions=(
                            _nested(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0,
                                    committed_offset=offset, committed_leader_epoch=-1,
                                    committed_metadata=""),)),)))
    w.call(_req(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False))
    return int(r.topics[0].partitions[0].error_code)


def test_txn_offset_commit_checks_member_and_generation_as_offset_commit_does(broker):
    """KIP-447: a zombie consumer (an older generation, a member the group removed) cannot
    commit offsets through a transaction either: ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID."""
    w = Wire(broker.bootstrap)
    try:
        member, gen = _join(w, "tg")
        assert _txn_offset_commit(w, "tg", gen - 1, member, 5) == G.ILLEGAL_GENERATION
        assert _txn_offset_commit(w, "tg", gen, "gone-member", 5) == G.UNKNOWN_MEMBER_ID
        assert _txn_offset_commit(w, "tg", gen, member, 5) == 0
        # Older clients (TxnOffsetCommit v0-v2) send no member: allowed, as in Kafka.
        assert _txn_offset_commit(w, "tg", -1, "", 5) == 0
        # And an unknown group's member is unknown.
        assert _txn_offset_commit(w, "tg-new", 3, "someone", 5) == G.UNKNOWN_MEMBER_ID
    finally:
        w.close()


def test_txn_offset_commit_needs_its_own_groups_offsets_partition_in_the_transaction(broker):
    """AddOffsetsToTxn adds one group's partition of the offsets topic: a TxnOffsetCommit of a
    group whose partition the transaction does not hold is INVALID_TXN_STATE, as in Kafka."""
    home = partition_for_group("tg-a", DEFAULT_OFFSETS_PARTITIONS)
    other = next(g for g in (f"tg-{i}" for i in range(100))
                 if partition_for_group(g, DEFAULT_OFFSETS_PARTITIONS) != home)
    w = Wire(broker.bootstrap)
    try:
        assert _txn_offset_commit(w, other, -1, "", 5, added_group="tg-a") == INVALID_TXN_STATE
        assert _txn_offset_commit(w, "tg-a", -1, "", 5) == 0
    finally:
        w.close()


def test_offset_commit_of_a_member_id_at_generation_minus_one_is_refused(broker):
    """Kafka commits without group management (generation -1) only with no member id: a
    member id (or instance id) is checked against the group, even an empty one."""
    w = Wire(broker.bootstrap)
    try:
        assert commit(w, "sg", -1, "", {0: 1}) == {0: 0}              # a simple commit
        assert commit(w, "sg", -1, "stranger", {0: 2}) == {0: G.UNKNOWN_MEMBER_ID}
        assert commit(w, "sg-new", -1, "stranger", {0: 2}) == {0: G.UNKNOWN_MEMBER_ID}
        assert fetch(w, "sg") == (0, {0: 1, 1: -1})
    finally:
        w.close()


def test_offset_fetch_answers_offsets_another_broker_wrote_for_a_transaction(broker, root):
    """The coordinator has the group loaded; another broker, the coordinator of a transaction
    that sent this group's offsets, writes them on commit (without the group's claim). The
    next OffsetFetch answers them, not the loaded copy (a consumer restarting from the loaded
    copy re-reads and commits a lower offset)."""
    w = Wire(broker.bootstrap)
    try:
        assert commit(w, "xg", -1, "", {0: 5, 1: 6}) == {0: 0, 1: 0}
        assert fetch(w, "xg") == (0, {0: 5, 1: 6})
        other = OffsetsStore(Storage(root), broker_id=7)
        other.commit_offsets("xg", {("gt", 0): OffsetAndMetadata(50)})   # no claim: a txn's
        assert fetch(w, "xg") == (0, {0: 50, 1: 6})
    finally:
        w.close()


def test_offset_fetch_never_answers_no_offset_for_a_group_dropped_while_it_waited(broker, root,
                                                                                 monkeypatch):
    """A fence (a pause past the lease) or a coordinator move drops the loaded groups from the
    event loop, maybe while an OffsetFetch waits for its read of the log. The answer must not
    then be taken from the group no longer loaded (every offset -1 and no error: a consumer
    starts over from auto.offset.reset, and commits offsets far below the group's)."""
    from kafkastore.protocol.apis.groups import service

    w = Wire(broker.bootstrap)
    try:
        assert commit(w, "dg", -1, "", {0: 40, 1: 41}) == {0: 0, 1: 0}
        svc = service(broker.server)
        registry = broker.server.brokers
        original = svc.store.claim_current
        fenced = []

        def claim_current_then_pause(claim):
            ok = original(claim)
            if not fenced:       # once: a pause right after the read, as a SIGSTOP there
                fenced.append(1)
                registry.fence("test: paused while an OffsetFetch read the log")
                import time
                time.sleep(1.0)   # the tick (every 0.1 s) drops every loaded group meanwhile
            return ok

        monkeypatch.setattr(svc.store, "claim_current", claim_current_then_pause)
        err, offsets = fetch(w, "dg")
        assert fenced
        # Either the client is told to ask again, or it gets the committed offsets.
        assert (err, offsets) == (0, {0: 40, 1: 41}) or (err != 0 and -1 not in offsets.values())
        w.close()
        w = Wire(broker.bootstrap)   # the connection from before the fence is closed: reconnect
        assert fetch(w, "dg") == (0, {0: 40, 1: 41})
    finally:
        w.close()


def _fetch_stable(w: Wire, group: str) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 with require_stable of ``gt``'s partitions 0 and 1: (offset, error)."""
    r = w.call(_req(9, 7, group_id=group, require_stable=True, topics=(
        _nested(9, 7, "OffsetFetchRequestTopic", name="gt", partition_indexes=(0, 1)),)))
    assert int(r.error_code) == 0
    return {p.partition_index: (p.committed_offset, int(p.error_code))
            for t in r.topics for p in t.partitions}


def test_a_partition_with_a_commit_being_written_is_unstable_for_require_stable(broker, monkeypatch):
    """Kafka answers UNSTABLE_OFFSET_COMMIT for a partition with an OffsetCommit not yet
    written (its pending offset commits) to a consumer that asks for stable offsets: one that
    took the partition over waits, instead of starting from the offset before a commit that
    is about to be acknowledged (and then committing below it)."""
    import threading

    from kafkastore.protocol.apis.groups import service

    w, w2 = Wire(broker.bootstrap), Wire(broker.bootstrap)
    try:
        assert commit(w, "pg", -1, "", {0: 10, 1: 11}) == {0: 0, 1: 0}
        svc = service(broker.server)
        original = svc.store.commit_offsets
        writing, release = threading.Event(), threading.Event()

        def slow_commit(*args):
            writing.set()
            assert release.wait(30)   # a slow store under the write
            return original(*args)

        monkeypatch.setattr(svc.store, "commit_offsets", slow_commit)
        answer = {}
        t = threading.Thread(target=lambda: answer.update(commit(w, "pg", -1, "", {0: 20})))
        t.start()
        assert writing.wait(30)
        assert _fetch_stable(w2, "pg") == {0: (10, UNSTABLE_OFFSET_COMMIT), 1: (11, 0)}
        assert fetch(w2, "pg") == (0, {0: 10, 1: 11})   # without require_stable: what is stored
        release.set()
        t.join(30)
        assert answer == {0: 0}
        assert _fetch_stable(w2, "pg") == {0: (20, 0), 1: (11, 0)}
    finally:
        release.set()
        w.close()
        w2.close()


def test_an_acknowledged_commit_of_a_generation_finds_that_generation_in_the_log(broker, root,
                                                                                 monkeypatch):
    """SyncGroup is answered before the new generation's metadata is written; an OffsetCommit
    of that generation is acknowledged only once it is in the log. Otherwise a coordinator
    that loads the group meanwhile (this one paused, the group moved) sees the previous
    generation and accepts commits from members that generation removed."""
    import time

    from kafkastore.protocol.apis.groups import service

    w = Wire(broker.bootstrap)
    try:
        assert commit(w, "other", -1, "", {0: 1}) == {0: 0}   # the group service is up
        svc = service(broker.server)
        original = svc.store.store_group

        def slow_store_group(*args):
            time.sleep(1.5)   # a slow store under the metadata write
            return original(*args)

        monkeypatch.setattr(svc.store, "store_group", slow_store_group)
        member, gen = _join(w, "mg")
        assert commit(w, "mg", gen, member, {0: 7}) == {0: 0}
        stored = OffsetsStore(Storage(root)).group("mg")
        assert stored.offsets[("gt", 0)].offset == 7
        assert stored.metadata is not None and stored.metadata.generation == gen
    finally:
        w.close()


def test_an_offset_fetch_answer_fences_the_coordinator_that_loaded_the_group_before(broker,
                                                                                   root):
    """Loading a group only reads it. A coordinator that loaded it before (then paused between
    its checks and its append) could append a commit after this coordinator answered
    OffsetFetch from the log without it: the consumer starts below an acknowledged commit.
    Answering seals the group under this coordinator's claim (as Kafka's new coordinator
    holds a newer leader epoch), so the earlier one's append is refused."""
    from kafkastore.errors import FencedError

    w = Wire(broker.bootstrap)
    try:
        earlier = OffsetsStore(Storage(root), broker_id=7)
        _, earlier_claim = earlier.claim("zg")            # it coordinated the group first
        earlier.commit_offsets("zg", {("gt", 0): OffsetAndMetadata(10)}, earlier_claim)
        assert fetch(w, "zg") == (0, {0: 10, 1: -1})      # this one loads it and answers
        with pytest.raises(FencedError):
            earlier.commit_offsets("zg", {("gt", 0): OffsetAndMetadata(30)}, earlier_claim)
        assert OffsetsStore(Storage(root)).group("zg").offsets[("gt", 0)].offset == 10
        assert fetch(w, "zg") == (0, {0: 10, 1: -1})
        assert commit(w, "zg", -1, "", {0: 12}) == {0: 0}
        assert fetch(w, "zg") == (0, {0: 12, 1: -1})
    finally:
        w.close()


def test_a_transaction_that_ends_while_an_offset_fetch_reads_is_never_answered_from_before_it(
        broker, root, monkeypatch):
    """A transaction's coordinator (maybe another broker) commits it by writing its offsets
    to the log and then deleting its pending document. An OffsetFetch with require_stable
    reads the log and looks for pending documents: if it read the log before the offsets
    landed and looked after the document was gone, it answered the offsets from before the
    transaction as stable (a read_committed consumer taking the partition over restarts
    below offsets its own committed transaction moved on: the harness's regressions of
    ``txn-g``). Now it looks first: a document it sees answers UNSTABLE_OFFSET_COMMIT, and
    one it does not see was deleted after its offsets landed, which its read then finds."""
    import time

    import json

    from kafkastore.protocol.apis.groups import service
    from kafkastore.protocol.coordinators.pending_offsets import PENDING_DIR

    w = Wire(broker.bootstrap)
    try:
        assert commit(w, "sg", -1, "", {0: 10, 1: 11}) == {0: 0, 1: 0}
        storage = Storage(root)
        # An open transaction's offsets for the group, as TxnOffsetCommit leaves them.
        storage.put(f"{PENDING_DIR}/{4242:020d}/{'sg'.encode().hex()}.json", json.dumps(
            {"epoch": 0, "txn_start_ms": int(time.time() * 1000), "offsets": [["gt", 0, 30, -1, ""]],
             "group": "sg", "transactional_id": "tx-sg"}).encode())
        assert _fetch_stable(w, "sg") == {0: (10, UNSTABLE_OFFSET_COMMIT), 1: (11, 0)}
        svc = service(broker.server)
        original = svc.store.group
        ended = []

        def read_then_the_transaction_ends(*args, **kwargs):
            state = original(*args, **kwargs)
            if not ended:   # once, right after this OffsetFetch's read of the log
                ended.append(1)
                other = OffsetsStore(Storage(root), broker_id=7)   # the txn's coordinator
                other.commit_offsets("sg", {("gt", 0): OffsetAndMetadata(30)})
                for info in storage.list(f"{PENDING_DIR}/"):
                    storage.delete([info.path[info.path.index(PENDING_DIR):]])
            return state

        monkeypatch.setattr(svc.store, "group", read_then_the_transaction_ends)
        answer = _fetch_stable(w, "sg")
        assert ended
        assert answer[0] in ((30, 0), (10, UNSTABLE_OFFSET_COMMIT)), answer
        monkeypatch.undo()
        assert _fetch_stable(w, "sg") == {0: (30, 0), 1: (11, 0)}
    finally:
        w.close()


def test_a_transactions_offsets_are_written_only_while_its_coordinator_holds_its_authority(root):
    """A transaction's coordinator writes the offsets it took from the pending document
    without the group's claim. If it paused in between (its lease lapsed, another broker
    finished the transaction and newer offsets landed), its write would put older offsets
    after them: the write asks its guard (the coordinator's authority) at each attempt."""
    from kafkastore.errors import FencedError

    store = OffsetsStore(Storage(root), broker_id=3)
    store.commit_offsets("wg", {("gt", 0): OffsetAndMetadata(151)})
    with pytest.raises(FencedError):
        store.commit_offsets("wg", {("gt", 0): OffsetAndMetadata(113)}, guard=lambda: False)
    assert OffsetsStore(Storage(root)).group("wg").offsets[("gt", 0)].offset == 151
    store.commit_offsets("wg", {("gt", 0): OffsetAndMetadata(160)}, guard=lambda: True)
    assert OffsetsStore(Storage(root)).group("wg").offsets[("gt", 0)].offset == 160
