"""Jobs that commit transactions in many partitions at once, as readers must see them: all
of a job's partitions or none.

A many-partition job (a Spark write into topics, :mod:`pipelines.sink.commit`)
decides once, then writes one COMMIT marker per partition, one after the other. A
read_committed reader that took its snapshot of the partitions between two of those
markers would see the job in some partitions and not in others. Kafka gives no such
guarantee across partitions; here the writer and the readers share three objects under
``_sink/`` so that a reader that *plans* (takes one snapshot of many partitions and reads
up to it) never sees a partial job:

* ``_sink/pending/<commit id>.json``: the decision record, put by the writer after its
  decision and before its first marker, deleted after its last. While it exists some
  marker may be missing; once it is gone, all are written.
* ``_sink/settled``: a random token the writer puts after its pending object and before
  its first marker ("a job started marking"), and again after its last marker and before
  it deletes its pending object ("a job finished marking").
* :func:`consistent` (the reader): roll every pending job forward (write its missing
  markers, as the writer would: a decided job can only commit), read the token, take the
  snapshot, then list the pending jobs and read the token again. If a pending job shows or
  the token changed, a job may have marked some partitions of the snapshot and not others:
  roll forward and take the snapshot again.

Why this is enough: a job whose markers straddle the snapshot had its pending object put
before its first marker; if the object was there at the first listing, the job was fully
marked before the snapshot; if it appeared later, it is either still there at the second
listing or was deleted after the new token was put, which the second token read sees.

Cost: a reader lists ``_sink/pending/`` (empty almost always) and reads one small object
twice, whatever the number of past jobs. Rolling forward writes markers; a reader without
write access (:class:`~kafkastore.errors.StoragePermissionError`) reads as if the pending
jobs had not committed yet: :func:`pending_caps` gives, per partition, the first offset of
a pending job's transaction, and the reader stays below it (:func:`consistent_capped`).

The pending object names each transaction's ``first_offset`` (read while the transaction
was still open, before the first marker), so a reader can cap a partition whose marker is
already written. Records of older writers lack it; the producer's oldest retained batch in
the partition's manifest stands in.

**Readers that do not plan**: a broker answers Fetch and ListOffsets partition by
partition, so it cannot retake a snapshot of many partitions. :class:`PendingJobs` keeps,
per broker, which committed transactions are known settled; a partition whose manifest
holds a committed transaction not yet known settled is checked once against a listing of
``_sink/pending/`` taken after that manifest was read (a committed transaction of a job
still marking has its pending object then), or against the broker's last listing when the
settled token, read after the manifest, is still the one read just before that listing:
no job put its pending object since, so a transaction whose job is not in that listing
was fully marked before it (one GET instead of one LIST per new transaction). A pending
job's transactions cap their partitions below their first offsets until the job is
settled; a job pending longer than a grace period (its driver died) is rolled forward by
the broker when it can write.
"""
from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, TypeVar

from .clock import SYSTEM, Clock
from .write.log_writer import LogWriter as Broker
from .errors import KafkaStoreError, ObjectNotFoundError, StoragePermissionError
from .manifest import Manifest
from .read.reader import PartitionReader
from .storage import Storage
from .write.transactions import open_transactions

#: Decision records whose COMMIT markers may not all be written yet.
PENDING_DIR = "_sink/pending/"
#: The token the writer of a many-partition job changes after its last marker.
SETTLED_PATH = "_sink/settled"
#: Snapshots a reader takes at most while jobs keep finishing under it.
MAX_SNAPSHOTS = 20

T = TypeVar("T")
TP = tuple[str, int]

log = logging.getLogger("kafkastore.job_commits")


def pending_path(record: Mapping[str, Any]) -> str:
    """The pending object of a decision record (by its commit id)."""
    # Records of older writers carry no commit id; their job name is unique as well.
    return f"{PENDING_DIR}{record.get('commit_id') or record['job']}.json"


def mark_pending(storage: Storage, record: Mapping[str, Any]) -> None:
    """Before a decided job's first marker: readers from now on roll it forward. The
    settled token changes after the pending object is put, so a reader that compares the
    token with the one it read before its last listing of ``_sink/pending/`` learns that a
    job may have started marking since (:class:`PendingJobs`)."""
    storage.put(pending_path(record), json.dumps(record, sort_keys=True).encode())
    _change_token(storage)


def _change_token(storage: Storage) -> None:
    storage.put(SETTLED_PATH, uuid.uuid4().hex.encode())


def finish_pending(storage: Storage, record: Mapping[str, Any]) -> None:
    """After a job's last marker: change the settled token, then drop its pending object
    (in that order: a reader that misses the object sees the new token)."""
    _change_token(storage)
    storage.delete([pending_path(record)])


def roll_forward(storage: Storage, record: Mapping[str, Any]) -> int:
    """Write the COMMIT markers of a decision record that are still missing; the number
    written. Within a partition the newest transaction goes first, so the partition's last
    stable offset moves past all of the record's transactions at once. A transaction
    already ended is skipped (a concurrent roll-forward may add one redundant COMMIT
    marker, which readers ignore as Kafka's do)."""
    by_partition: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for t in record["transactions"]:
        by_partition.setdefault((t["topic"], int(t["partition"])), []).append(t)
    written = 0
    for (topic, partition), txns in sorted(by_partition.items()):
        open_now = {o.producer_id: o for o in open_transactions(storage, topic, partition)}
        pending = [(open_now[t["producer_id"]], t) for t in txns
                   if t["producer_id"] in open_now
                   and open_now[t["producer_id"]].producer_epoch == t["producer_epoch"]]
        for txn, _ in sorted(pending, key=lambda x: -x[0].first_offset):
            Broker(storage, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                   housekeeping=False).write_marker(topic, partition, commit=True)
            written += 1
    return written


def _open_first_offsets(storage: Storage, record: Mapping[str, Any]) -> dict[tuple, int]:
    """``(topic, partition, producer id, epoch) -> first offset`` of the record's
    transactions that are still open."""
    parts = sorted({(t["topic"], int(t["partition"])) for t in record["transactions"]})
    return {(tp[0], tp[1], o.producer_id, o.producer_epoch): o.first_offset
            for tp in parts for o in open_transactions(storage, *tp)}


def _txn_key(t: Mapping[str, Any]) -> tuple:
    return t["topic"], int(t["partition"]), t["producer_id"], t["producer_epoch"]


def missing_markers(storage: Storage, record: Mapping[str, Any]) -> bool:
    """Whether some transaction of a decision record is still open (a marker missing)."""
    open_now = _open_first_offsets(storage, record)
    return any(_txn_key(t) in open_now for t in record["transactions"])


def _with_first_offsets(storage: Storage, record: Mapping[str, Any],
                        open_now: Mapping[tuple, int]) -> dict:
    """The record with each transaction's first offset: from the open transactions, else
    from the pending object an earlier (dead) run of the same commit put."""
    known: dict[tuple, int] = {}
    try:
        earlier = json.loads(storage.get(pending_path(record)))
        known = {_txn_key(t): t["first_offset"] for t in earlier.get("transactions", ())
                 if "first_offset" in t}
    except ObjectNotFoundError:
        pass
    txns = []
    for t in record["transactions"]:
        first = open_now.get(_txn_key(t), known.get(_txn_key(t), t.get("first_offset")))
        txns.append(dict(t) if first is None else {**t, "first_offset": first})
    return {**record, "transactions": txns}


def complete(storage: Storage, record: Mapping[str, Any]) -> int:
    """Write a decided job's missing COMMIT markers the way readers can rely on: pending
    object (naming each transaction's first offset), markers, settled token, pending
    object dropped; the markers written. A record whose markers are all written costs
    only the check."""
    open_now = _open_first_offsets(storage, record)
    if not any(_txn_key(t) in open_now for t in record["transactions"]):
        return 0
    mark_pending(storage, _with_first_offsets(storage, record, open_now))
    written = roll_forward(storage, record)
    finish_pending(storage, record)
    return written


def _pending_records(storage: Storage) -> list[dict]:
    out = []
    for info in storage.list(PENDING_DIR):
        try:
            out.append(json.loads(storage.get(info.path)))
        except ObjectNotFoundError:
            continue   # deleted since the listing: its job finished marking
    return out


def settle_pending(storage: Storage) -> int:
    """Roll every pending job forward and drop its pending object; the markers written."""
    written = 0
    for record in _pending_records(storage):
        written += roll_forward(storage, record)
        finish_pending(storage, record)
    return written


def _token(storage: Storage) -> bytes | None:
    try:
        return storage.get(SETTLED_PATH)
    except ObjectNotFoundError:
        return None   # no many-partition job ever finished on this root


def consistent(storage: Storage, take: Callable[[], T]) -> T:
    """``take()`` (a snapshot of many partitions), taken so that it holds every decided
    many-partition job in all of its partitions or in none (see the module docstring).
    Retakes the snapshot while jobs finish under it, at most :data:`MAX_SNAPSHOTS` times;
    the last one is returned after a final roll-forward of what is pending.

    A reader that may not write (:class:`~kafkastore.errors.StoragePermissionError` while
    rolling a job forward) and whose snapshot is a mapping of
    :class:`~kafkastore.read.reader.PartitionReader` reads as if the pending jobs had not
    committed yet (:func:`consistent_capped`); other snapshots re-raise the error."""
    try:
        for _ in range(MAX_SNAPSHOTS):
            settle_pending(storage)
            before = _token(storage)
            result = take()
            if not storage.list(PENDING_DIR) and _token(storage) == before:
                return result
        settle_pending(storage)
        return take()
    except StoragePermissionError:
        capped = consistent_capped(storage, take)
        if capped is None:
            raise
        return capped


def _is_readers(result: Any) -> bool:
    return isinstance(result, Mapping) and all(isinstance(r, PartitionReader)
                                               for r in result.values())


def consistent_capped(storage: Storage, take: Callable[[], Mapping[Any, Any]]) -> dict | None:
    """Without writing: ``take()`` (partition readers) with every job still pending after
    the snapshot read as not committed yet, each reader's last stable offset held below
    the pending jobs' transactions in its partition (:func:`uncommitted_view`). A job that
    finished marking under the snapshot changes the settled token: the snapshot is taken
    again (as :func:`consistent` does). None when ``take()`` gives no partition readers."""
    result: Any = None
    records: list[dict] = []
    for _ in range(MAX_SNAPSHOTS):
        before = _token(storage)
        result = take()
        if not _is_readers(result):
            return None
        records = _pending_records(storage)
        if _token(storage) == before:
            break
    return {key: uncommitted_view(reader, records) for key, reader in result.items()}


def uncommitted_view(reader, records: Iterable[Mapping[str, Any]]):
    """``reader`` (a :class:`~kafkastore.read.reader.PartitionReader`) as if the
    transactions of ``records`` (pending jobs) in its partition were still open: its
    manifest's producers get their open transaction back (at the first offset the record
    names, else the producer's oldest retained batch), which holds the last stable offset
    below them; ``reader`` itself when none of them wrote there."""
    m = reader.manifest
    reopened = {}
    for record in records:
        for t in record["transactions"]:
            if (t["topic"], int(t["partition"])) != (reader.topic, reader.partition):
                continue
            st = m.producers.get(t["producer_id"])
            first = t.get("first_offset")
            first = _producer_floor(m, t["producer_id"]) if first is None else int(first)
            if st is None or first is None or st.txn_first_offset is not None:
                continue   # never wrote here, or still open: the LSO holds it already
            if first < m.high_watermark:
                reopened[t["producer_id"]] = replace(st, txn_first_offset=first)
    if not reopened:
        return reader
    view = replace(m, producers={**m.producers, **reopened})
    return PartitionReader(reader.storage, reader.topic, reader.partition, manifest=view)


# --------------------------------------------------------------------------- capped readers

def _producer_floor(m: Manifest, producer_id: int) -> int | None:
    """The first offset of ``producer_id``'s oldest batch retained in ``m`` (the stand-in
    for a transaction's first offset that a record of an older writer does not name)."""
    st = m.producers.get(producer_id)
    if st is None or not st.batches:
        return None
    return min(b.first_offset for b in st.batches)


def pending_caps(records: Iterable[Mapping[str, Any]],
                 manifest_of: Callable[[str, int], Manifest | None] | None = None) -> dict[TP, int]:
    """Per partition, the offset a read_committed reader stays below while ``records``
    (pending decision records) are not settled: the lowest first offset of their
    transactions there. ``manifest_of(topic, partition)`` supplies the stand-in for a
    transaction whose first offset the record does not name (None: that partition is
    not capped for it)."""
    caps: dict[TP, int] = {}
    for record in records:
        for t in record["transactions"]:
            tp = (t["topic"], int(t["partition"]))
            first = t.get("first_offset")
            if first is None and manifest_of is not None:
                m = manifest_of(*tp)
                first = None if m is None else _producer_floor(m, t["producer_id"])
            if first is not None:
                caps[tp] = min(caps.get(tp, first), int(first))
    return caps


def pending_records(storage: Storage) -> list[dict]:
    """The decision records of the jobs still marking (their pending objects)."""
    return _pending_records(storage)


@dataclass
class _Listing:
    """A broker's last listing of ``_sink/pending/``."""
    token: bytes | None      # the settled token, read just before the listing
    listed_at: float         # monotonic time before the token read and the listing
    valid_at: float          # latest time a token read showed no job started since
    records: list[dict]      # the pending jobs (past the roll-forward of stale ones)
    keys: set[tuple]         # their transactions (_txn_key)


class PendingJobs:
    """One broker's view of the many-partition jobs still marking, for the readers that
    answer partition by partition (Fetch and ListOffsets under read_committed): see the
    module docstring, "Readers that do not plan".

    :meth:`note` the manifests a request will read first (so one listing covers them
    all), then ask :meth:`cap` for each. A partition whose committed transactions are all
    known settled costs a dict lookup; a new manifest version costs one pass over its
    producers; a committed transaction seen for the first time costs one read of the
    settled token, and a listing of ``_sink/pending/`` only when the token changed since
    the last listing (a job started or finished marking) or that listing named a job
    still pending; a listing is shared by every partition noted before it. After that the
    transaction is known settled or its job is pending. While a job is pending the
    listing is reused for ``ttl_s``; after ``roll_forward_after_s`` the job is rolled
    forward here (when this root is writable). Thread-safe; :meth:`note` and :meth:`cap`
    may block on storage."""

    def __init__(self, storage: Storage, clock: Clock | None = None, *, ttl_s: float = 0.5,
                 roll_forward_after_s: float = 5.0, max_settled: int = 200_000):
        self.storage = storage
        self.clock = clock or getattr(storage, "clock", None) or SYSTEM
        self.ttl_s = ttl_s
        self.roll_forward_after_s = roll_forward_after_s
        self.max_settled = max_settled
        self._lock = threading.Lock()
        #: (topic, partition, producer id, epoch) of committed transactions known settled.
        self._settled: set[tuple] = set()
        #: per partition: (manifest version, its committed transactions not known settled
        #: when noted, when first noted)
        self._noted: dict[TP, tuple[int, tuple, float]] = {}
        self._listing: _Listing | None = None
        self._pending_since: dict[str, float] = {}
        self.listings = 0   # listings of _sink/pending/ done (tests, stats)
        self.token_reads = 0   # reads of the settled token that spared a listing (or not)
        self.rolled_forward = 0   # jobs this broker rolled forward

    def note(self, m: Manifest) -> tuple[int, tuple, float]:
        """Remember ``m``'s committed transactions not known settled (once per version)."""
        tp = (m.topic, m.partition)
        with self._lock:
            hit = self._noted.get(tp)
        if hit is not None and hit[0] == m.version:
            return hit
        now = self.clock.monotonic_s()
        keys = [(m.topic, m.partition, pid, st.epoch) for pid, st in m.producers.items()
                if st.txn_first_offset is None and st.batches]
        with self._lock:
            hit = (m.version, tuple(k for k in keys if k not in self._settled), now)
            self._noted[tp] = hit
        return hit

    def cap(self, m: Manifest) -> int | None:
        """The offset a read_committed reader of ``m``'s partition stays below because a
        job with a transaction there is still marking (None: no cap)."""
        _, suspects, noted_at = self.note(m)
        if not suspects:
            return None
        with self._lock:
            suspects = tuple(k for k in suspects if k not in self._settled)
        if not suspects:
            return None
        listed_at, records = self._listing_for(suspects, noted_at)
        firsts: dict[tuple, int | None] = {}
        for record in records:
            for t in record["transactions"]:
                if _txn_key(t) in suspects:
                    first = t.get("first_offset")
                    firsts[_txn_key(t)] = (_producer_floor(m, t["producer_id"])
                                           if first is None else int(first))
        cap = None
        with self._lock:
            if len(self._settled) > self.max_settled:
                self._settled.clear()   # bounded: forgotten ones cost a listing again
            for key in suspects:
                if key in firsts:
                    if firsts[key] is not None:
                        cap = firsts[key] if cap is None else min(cap, firsts[key])
                elif listed_at >= noted_at:
                    self._settled.add(key)
        return cap

    def _listing_for(self, suspects: tuple, noted_at: float) -> tuple[float, list[dict]]:
        """``(as of, pending records)`` that decides ``suspects``: a suspect not in the
        records is settled when "as of" is not older than ``noted_at``. The last listing
        when it is younger than ``ttl_s`` and either known valid since the suspects were
        noted or names all of them pending (capping on it is safe, if late by at most
        ``ttl_s``); else, when it names none of them, the last listing again if the
        settled token still reads as just before it (no job started marking since: see
        the module docstring); else a new listing."""
        with self._lock:
            listing = self._listing
        now = self.clock.monotonic_s()
        if listing is None:
            return self._relist()
        wanted = set(suspects)
        if now - listing.listed_at < self.ttl_s and (
                listing.valid_at >= noted_at or wanted <= listing.keys):
            return listing.valid_at, listing.records
        if not wanted & listing.keys:
            started = self.clock.monotonic_s()
            token = _token(self.storage)
            self.token_reads += 1
            if token == listing.token:
                with self._lock:
                    listing.valid_at = max(listing.valid_at, started)
                return started, listing.records
        return self._relist()

    def _relist(self) -> tuple[float, list[dict]]:
        started = self.clock.monotonic_s()
        # The token is read before the listing: equal later, no job put a pending object
        # after this listing (mark_pending changes it after the put).
        token = _token(self.storage)
        records = _pending_records(self.storage)
        self.listings += 1
        records = self._roll_forward_stale(records, started)
        listing = _Listing(token=token, listed_at=started, valid_at=started, records=records,
                           keys={_txn_key(t) for r in records for t in r["transactions"]})
        with self._lock:
            if self._listing is None or self._listing.listed_at <= started:
                self._listing = listing
        return started, records

    def _roll_forward_stale(self, records: list[dict], now: float) -> list[dict]:
        """Roll forward the jobs pending longer than the grace period (their driver is
        gone or stuck); the records still pending. A root this broker cannot write keeps
        its pending jobs (their partitions stay capped)."""
        still = []
        seen = {pending_path(r) for r in records}
        with self._lock:
            for path in [p for p in self._pending_since if p not in seen]:
                del self._pending_since[path]
            since = {pending_path(r): self._pending_since.setdefault(pending_path(r), now)
                     for r in records}
        for record in records:
            if now - since[pending_path(record)] < self.roll_forward_after_s:
                still.append(record)
                continue
            try:
                roll_forward(self.storage, record)
                finish_pending(self.storage, record)
                self.rolled_forward += 1
                log.info("rolled forward write job %s (pending %.1f s)", record.get("job"),
                         now - since[pending_path(record)])
            except StoragePermissionError:
                still.append(record)
            except KafkaStoreError as exc:   # tried again at the next listing
                log.warning("rolling forward write job %s failed: %s", record.get("job"), exc)
                still.append(record)
        return still
