"""What a transaction coordinator's reads of ``__transaction_state`` cost, and what they hold up.

On S3 every store request is paid under the store's latency (the fault harness injects 0.3-3 s
per request for seconds on end), so a coordinator step must not wait behind reads it does not
need: the periodic refresh of every partition (a few requests each) held the store's one lock
while it read them one after the other, and every AddPartitions, EndTxn and produce check of
any id waited for all of it (12 s at 0.3 s a request; at the harness's latencies longer than
the transaction timeout). A state write right after the step's own read read the partition
again first (two requests more per write)."""
from __future__ import annotations

import threading
import uuid

from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.storage import Storage
from tests.faults import FaultyFS

#: How long a test waits for something that happens at once unless the code under test
#: blocks it (a generous bound on a loaded machine, never a measured time).
WAIT_S = 60


def _ongoing(tid: str, pid: int) -> T.TxnMetadata:
    return T.TxnMetadata(tid, pid, 0, 60_000, T.TxnState.ONGOING, frozenset({("x", 0)}), 1_000, 1_000)


def _store(tmp_path) -> tuple[TxnStore, FaultyFS]:
    fs = FaultyFS(Storage(f"file://{tmp_path}/root").fs)
    storage = Storage(f"file://{tmp_path}/root", fs=fs)
    store = TxnStore(storage)
    store.put(_ongoing("seed", 1))   # creates the topic
    return store, fs


def _ids_of_two_partitions(store: TxnStore) -> tuple[str, str]:
    """Two transactional ids whose states live in different partitions."""
    first = "tx-" + uuid.uuid4().hex[:8]
    while True:
        other = "tx-" + uuid.uuid4().hex[:8]
        if store.partition_for(other) != store.partition_for(first):
            return first, other


def _hold_reads_of(fs: FaultyFS, partition: int) -> tuple[threading.Event, threading.Event]:
    """Reads of ``__transaction_state/<partition>/`` wait at a gate: (entered, release)."""
    entered, release = threading.Event(), threading.Event()

    def hold(_op, _path):
        entered.set()
        release.wait(WAIT_S)

    fs.inject(("read", "stat", "list"), "before", match=f"__transaction_state/{partition}/",
              count=None, callback=hold)
    return entered, release


def test_a_full_refresh_does_not_hold_up_the_read_of_an_id_in_another_partition(tmp_path):
    store, fs = _store(tmp_path)
    slow_id, other_id = _ids_of_two_partitions(store)
    store.put(_ongoing(other_id, 7))
    entered, release = _hold_reads_of(fs, store.partition_for(slow_id))
    refresher = threading.Thread(target=store.refresh, daemon=True)
    refresher.start()
    try:
        assert entered.wait(WAIT_S), "the full refresh never read the held partition"
        got: list = []
        reader = threading.Thread(target=lambda: got.append(store.get(other_id)), daemon=True)
        reader.start()
        reader.join(WAIT_S)
        # Still held: the read of the other partition went on without waiting for it.
        assert not release.is_set() and refresher.is_alive()
        assert got and got[0].producer_id == 7
    finally:
        release.set()
        refresher.join(WAIT_S)


def test_a_full_refresh_reads_the_partitions_side_by_side(tmp_path):
    store, fs = _store(tmp_path)
    first, second = _ids_of_two_partitions(store)
    gates = [_hold_reads_of(fs, store.partition_for(tid)) for tid in (first, second)]
    refresher = threading.Thread(target=store.refresh, daemon=True)
    refresher.start()
    try:
        # Both partitions' reads are in flight while neither is released.
        assert all(entered.wait(WAIT_S) for entered, _ in gates)
    finally:
        for _, release in gates:
            release.set()
        refresher.join(WAIT_S)
    assert not refresher.is_alive()


def test_a_state_write_right_after_its_steps_read_reads_nothing_again(tmp_path):
    store, fs = _store(tmp_path)
    tid = "tx-" + uuid.uuid4().hex[:8]
    cur = store.get(tid)
    assert cur is None
    store.put(_ongoing(tid, 3), cur)
    cur = store.get(tid)
    fs.inject(("read", "stat", "list", "write"), "before", count=None,
              callback=lambda op, path: None)   # logs every request from here on
    nxt = T.TxnMetadata(tid, 3, 0, 60_000, T.TxnState.PREPARE_COMMIT, cur.partitions, 1_000, 2_000)
    store.put(nxt, cur)
    # The append commit's own four requests (its head, the upload, the probe for a hole,
    # the version): no read of the topic's metadata or of the head before them (six before).
    assert [(op, "manifest" if "/_manifest/" in path else path.rsplit(".", 1)[-1])
            for op, _, path in fs.log] == [("read", "manifest"), ("write", "log"),
                                           ("read", "manifest"), ("write", "manifest")]
    assert store.get(tid) == nxt


def test_a_state_write_on_a_stale_read_is_still_refused(tmp_path):
    """The fencing is unchanged: another coordinator's write since the step's read makes the
    conditional commit fail, the write reads again and is refused."""
    from kafkastore.errors import TxnStateFencedError

    import pytest

    store, _ = _store(tmp_path)
    tid = "tx-" + uuid.uuid4().hex[:8]
    store.put(_ongoing(tid, 3), store.get(tid))
    cur = store.get(tid)
    other = TxnStore(store.storage)   # another broker's coordinator
    bumped = T.TxnMetadata(tid, 3, 1, 60_000, T.TxnState.EMPTY, frozenset(), -1, 3_000)
    other.put(bumped, other.get(tid))
    with pytest.raises(TxnStateFencedError):
        store.put(T.TxnMetadata(tid, 3, 0, 60_000, T.TxnState.PREPARE_COMMIT, cur.partitions,
                                1_000, 2_000), cur)
    assert store.get(tid) == bumped


def test_a_read_of_an_id_costs_one_store_request_on_a_warm_partition(tmp_path):
    """The next version's probe, and no read of the topic's metadata (two before)."""
    store, fs = _store(tmp_path)
    tid = "tx-" + uuid.uuid4().hex[:8]
    store.put(_ongoing(tid, 3), store.get(tid))
    store.get(tid)
    fs.inject(("read", "stat", "list"), "before", count=None, callback=lambda op, path: None)
    assert store.get(tid).producer_id == 3
    assert [(op, "/_manifest/" in path) for op, _, path in fs.log] == [("read", True)]


class _CountedWaits:
    """Wraps the store's per-partition locks: ``waiting`` is set once ``n`` callers
    are at a partition's lock (holding it or waiting for it)."""

    def __init__(self, store, n: int):
        self.n, self.count, self.waiting = n, 0, threading.Event()
        self._guard = threading.Lock()
        real = store._partition_lock

        def partition_lock(p):
            lock = real(p)
            outer = self

            class Counted:
                def __enter__(self):
                    with outer._guard:
                        outer.count += 1
                        if outer.count >= outer.n:
                            outer.waiting.set()
                    return lock.__enter__()

                def __exit__(self, *exc):
                    return lock.__exit__(*exc)

            return Counted()

        store._partition_lock = partition_lock


def test_reads_of_one_partition_that_wait_for_each_other_share_one_read(tmp_path):
    store, fs = _store(tmp_path)
    first = "tx-" + uuid.uuid4().hex[:8]
    same = [tid for tid in ("tx-" + uuid.uuid4().hex[:8] for _ in range(400))
            if store.partition_for(tid) == store.partition_for(first)][:2]
    for i, tid in enumerate([first, *same]):
        store.put(_ongoing(tid, 10 + i), store.get(tid))
    p = store.partition_for(first)
    entered, release = threading.Event(), threading.Event()

    def hold_first(_op, _path):
        entered.set()
        release.wait(WAIT_S)

    fs.inject("read", "before", match=f"__transaction_state/{p}/_manifest/", count=1, callback=hold_first)
    reads = fs.inject("read", "before", match=f"__transaction_state/{p}/_manifest/", count=None,
                      callback=lambda op, path: None)
    waits = _CountedWaits(store, 3)
    got: dict = {}
    threads = [threading.Thread(target=lambda tid=tid: got.update({tid: store.get(tid)}), daemon=True)
               for tid in [first, *same]]
    threads[0].start()
    assert entered.wait(WAIT_S)
    for t in threads[1:]:
        t.start()
    assert waits.waiting.wait(WAIT_S)   # the two later reads wait for the first
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert {tid: m.producer_id for tid, m in got.items()} == {first: 10, same[0]: 11, same[1]: 12}
    # The held read, then one read that both waiting callers share (three before).
    assert reads.fired == 2
