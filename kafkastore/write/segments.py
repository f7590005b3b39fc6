"""The one writer of segments: upload a built segment, turn it into its manifest entry,
and commit appends with one policy for everything a writer has to choose.

Every producer of segments goes through here: the library :class:`~kafkastore.write.log_writer.LogWriter`
(and through it the group offsets and the schema store), serve's
:class:`~kafkastore.protocol.appender.Appender` (produce and transaction markers),
imports (:func:`kafkastore.write.kafka_import.import_kafka_dir`), compaction and merging. The commit
itself is :meth:`kafkastore.manifest.ManifestStore.commit` on the one commit engine; what
this module adds is what every writer did around it, once:

* **Uploads** (:func:`put_segment_objects`): a segment's objects (``.index``,
  ``.timeindex``, ``.log``; an empty index is not uploaded, its entry records size 0,
  which every reader takes as "absent") go up together. On local files that is one
  :meth:`Storage.put_many` (each file fsynced concurrently, each directory once:
  cheaper than three puts and as durable); on an object store, where ``put_many`` is
  one PUT after another, the PUTs run side by side (each waits a round trip). Order
  is free: nothing is visible before the manifest lists it, and a half-uploaded set is
  an unlisted orphan that gc removes after its grace.
  An empty index is uploaded only where the file set keeps Kafka's shape
  (``empty_indexes``: an import adopts a Kafka directory as it is).
* **Small segments** (:func:`write_segment` with ``index_interval_bytes``): a segment
  shorter than ``index.interval.bytes``, or one whose ``.index`` has no entry anyway (a
  single batch, however large), goes up as its ``.log`` alone (a reader scans it from
  position 0 with or without its indexes: a ``.timeindex`` only names an offset, which
  the absent ``.index`` places at position 0; merging builds the indexes later), so a
  small commit, and a transaction's batch at a partition, is two objects: the log and
  the manifest version.
* **Stale uploads** (:class:`Uploads`, :func:`commit_appending`): a commit refuses to
  list a file written more than half the gc grace floor ago (gc may already have taken
  it). Uploads are kept across the attempts of one commit per placement (the high
  watermark they were built for); a retry re-uploads, under a new id, exactly the files
  :meth:`ManifestStore.stale_uploads` names -- judged by the store's own upload times,
  the same measure the commit checks, not a private cache -- and a commit refused all
  the same is tried again, at most :data:`STALE_ROUNDS` times, before the writer gives up
  with :class:`StaleUploadError`. Compaction and merging, whose uploads are whole
  rewrites planned on one manifest, give up at once and leave their files to gc.
* **Retries**: no attempt cap (``max_attempts=None``). A conflict means another
  writer's version landed, i.e. the log made progress, so the loop ends when the
  contention does; a cap only turned contention into errors that the callers retry the
  same way (the LogWriter keeps the batches for its next flush, a Kafka client resends).
* **Producer state** (:func:`expired_producers`): a produce commit drops the state of
  producers idle for longer than ``producer.id.expiration.ms`` (Kafka's default, one
  day, by their last batch's timestamp) with no open transaction, as Kafka's broker
  does, so manifests do not grow with every producer that ever wrote. Serve's Appender
  and the library LogWriter both do. As in Kafka, a producer whose records carry timestamps
  older than the expiration counts as idle: another producer's commit may drop its state,
  and a retry of its batch after that is no longer recognised as a duplicate.
* **Sequences** (:func:`check_sequence`): a client's batch with its own producer id
  (serve's Produce, :meth:`LogWriter.append_batch`) is checked by Kafka's rule, once; a
  transactional copy of a batch whose transaction already ended is refused, not taken
  for a retry (``TXN_ENDED``).
* **The entry** (:func:`segment_entry`): the one function that turns a segment's
  statistics and its uploaded bytes into a :class:`~kafkastore.manifest.SegmentEntry`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Hashable, Iterable, Sequence

from fsspec.implementations.local import LocalFileSystem

from .. import layout
from ..errors import StaleUploadError
from ..format.crc import crc32c
from ..manifest import BatchMetadata, Manifest, ManifestStore, ProducerState, SegmentEntry
from ..storage import Storage
from ..threads import shared_pool

#: How often a commit uploads again the files that grew too old before it landed.
STALE_ROUNDS = 3
#: Kafka's ``producer.id.expiration.ms``: an idle producer's state goes after this long.
PRODUCER_ID_EXPIRATION_MS = 86_400_000
#: At most this many idle producers are dropped by one commit (bounded work per commit).
EXPIRE_PER_COMMIT = 100


def put_segment_objects(storage: Storage, topic: str, partition: int, base_offset: int,
                        segment_id: str, log: Any, index: bytes, timeindex: bytes, *,
                        empty_indexes: bool = False) -> None:
    """Upload a segment: its non-empty indexes (all with ``empty_indexes``) and ``log``
    (bytes, or a tuple or list of buffers written one after another, as
    :meth:`Storage.put_many` takes them)."""
    items = [(layout.segment_path(topic, partition, base_offset, segment_id, ext), data)
             for ext, data in ((".index", index), (".timeindex", timeindex), (".log", log))
             if ext == ".log" or empty_indexes or len(data)]
    if len(items) == 1 or isinstance(storage.fs, LocalFileSystem):
        storage.put_many(items)
        return
    pool = shared_pool("upload", 8)
    futures = [pool.submit(storage.put, rel, b"".join(data) if isinstance(data, (tuple, list))
                           else data) for rel, data in items]
    for f in futures:
        f.result()  # re-raises a failed put: the caller does not commit


def segment_entry(stats, *, segment_id: str, size: int, checksum: int, index_size: int,
                  timeindex_size: int, writer_id: int, leader_epoch: int, shift: int = 0,
                  next_offset: int | None = None, aborted_txns: tuple = (),
                  delete_horizon_ms: int | None = None) -> SegmentEntry:
    """The manifest entry of an uploaded segment.

    ``stats`` is the segment's :class:`~kafkastore.format.segment_stats.SegmentStats` (or any
    object with its fields) in the offsets it was built at; ``shift`` moves them to
    where the segment lands (a writer builds at relative offsets and commits at the high
    watermark). ``next_offset`` overrides the end of the range (an import absorbs the
    gap compaction left before the next segment). ``size`` and ``checksum`` are of the
    ``.log`` bytes; an index size of 0 means the index was not uploaded.
    """
    mto = stats.offset_of_max_timestamp
    return SegmentEntry(
        base_offset=stats.base_offset + shift,
        next_offset=stats.next_offset + shift if next_offset is None else next_offset,
        record_count=stats.record_count, size=size, min_timestamp=stats.min_timestamp,
        max_timestamp=stats.max_timestamp, segment_id=segment_id, writer_id=writer_id,
        leader_epoch=leader_epoch, checksum=checksum, index_size=index_size,
        timeindex_size=timeindex_size, aborted_txns=tuple(aborted_txns),
        max_timestamp_offset=mto + shift if mto >= 0 and stats.batch_count else -1,
        delete_horizon_ms=delete_horizon_ms)


def write_segment(storage: Storage | None, topic: str, partition: int, stats, log: Any,
                  index: bytes, timeindex: bytes, *, writer_id: int, leader_epoch: int,
                  shift: int = 0, index_interval_bytes: int | None = None,
                  segment_id: str | None = None, empty_indexes: bool = False,
                  **entry_fields) -> SegmentEntry:
    """Upload one built segment and return its manifest entry (not committed yet).

    ``log`` is bytes or a tuple/list of buffers (the ``.log`` is their concatenation).
    With ``index_interval_bytes``, a log shorter than it, or whose ``index`` is empty,
    goes up alone (see the module docstring). ``storage=None`` computes the entry without uploading anything
    (compaction's ``rewrite_group(upload=False)``). ``empty_indexes`` uploads an index the builder left empty
    (a Kafka-shaped file set, as an import adopts it). ``entry_fields`` go to
    :func:`segment_entry`.
    """
    parts = log if isinstance(log, (tuple, list)) else (log,)
    size, checksum = 0, 0
    for part in parts:
        size += memoryview(part).nbytes
        checksum = crc32c(part, checksum)
    if index_interval_bytes is not None and (size < index_interval_bytes or not len(index)):
        # A writer's small segment (Kafka's sparse rule gives its .index no entry), or one
        # whose .index has no entry all the same (one batch, however large): every reader
        # starts such a log at position 0, and its .timeindex can only send a reader to an
        # offset the absent .index then places at position 0 too. Uploading them would
        # cost a file (create, fsync) per commit and save no read.
        index = timeindex = b""
    seg_id = segment_id or layout.new_segment_id()
    entry = segment_entry(stats, segment_id=seg_id, size=size, checksum=checksum,
                          index_size=len(index), timeindex_size=len(timeindex),
                          writer_id=writer_id, leader_epoch=leader_epoch, shift=shift,
                          **entry_fields)
    if storage is not None:
        put_segment_objects(storage, topic, partition, entry.base_offset, seg_id, log, index,
                            timeindex, empty_indexes=empty_indexes)
    return entry


class Uploads:
    """The segments one commit uploaded, kept across its attempts.

    :meth:`get` returns the entries for a placement ``key`` (whatever the segments'
    bytes depend on: the high watermark they were built at, and which batches),
    uploading them on first use and, on later attempts, uploading again (under new
    ids) only those :meth:`ManifestStore.stale_uploads` names.
    """

    def __init__(self, store: ManifestStore):
        self.store = store
        self._placed: dict[Hashable, list[SegmentEntry]] = {}

    def get(self, key: Hashable, count: int,
            upload: Callable[[int], SegmentEntry]) -> list[SegmentEntry]:
        """Entries of the ``count`` segments at ``key``; ``upload(i)`` writes segment ``i``."""
        fresh = self._placed.get(key)
        if fresh is None:
            fresh = self._placed[key] = [upload(i) for i in range(count)]
            return fresh
        stale = {e.segment_id for e in self.store.stale_uploads(fresh)}
        for i, e in enumerate(fresh):
            if e.segment_id in stale:
                fresh[i] = upload(i)
        return fresh


def commit_appending(store: ManifestStore, build, *, operation: str, writer: str,
                     now_ms: int | None, uploaded: str, consequence: str) -> Manifest | None:
    """:meth:`ManifestStore.commit` of a ``build`` that appends segments it uploads
    through an :class:`Uploads`: a commit refused for stale files is tried again (the
    build uploads them anew) up to :data:`STALE_ROUNDS` times, then
    :class:`StaleUploadError` saying that ``uploaded`` (e.g. "3 segment(s)") went up
    that many times and ``consequence``. No attempt cap on conflicts (module docstring).
    """
    rounds = 1
    while True:
        try:
            return store.commit(build, operation=operation, writer=writer, now_ms=now_ms)
        except StaleUploadError as exc:
            if rounds >= STALE_ROUNDS:
                raise StaleUploadError(
                    f"{exc}; gave up after uploading {uploaded} {STALE_ROUNDS} times: "
                    f"{consequence}", segment_ids=exc.segment_ids) from None
            rounds += 1


def expired_producers(m: Manifest, keep: Iterable[int], now_ms: int,
                      expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                      limit: int = EXPIRE_PER_COMMIT) -> list[int]:
    """Producers of ``m`` idle for longer than ``expiration_ms`` (by their last batch's
    timestamp) without an open transaction, other than those in ``keep`` (the ones this
    commit writes): their state goes, as Kafka's broker drops it."""
    keep = set(keep)
    out = []
    for pid, st in m.producers.items():
        if (pid not in keep and st.txn_first_offset is None and st.last_timestamp >= 0
                and now_ms - st.last_timestamp > expiration_ms):
            out.append(pid)
            if len(out) >= limit:
                break
    return out


#: :func:`check_sequence` verdicts.
APPEND, DUPLICATE, FENCED, OUT_OF_ORDER = "append", "duplicate", "fenced", "out of order"
TXN_ENDED = "transaction ended"
_INT32_MASK = 0x7FFFFFFF


def check_sequence(state: ProducerState | None, producer_id: int, epoch: int,
                   base_sequence: int, last_sequence: int, *,
                   transactional: bool = False) -> tuple[str, Any]:
    """Kafka's sequence check of a client's batch against its producer's state at the
    partition (``ProducerStateManager``): ``(verdict, value)``.

    * ``(APPEND, state)``: the state to append the batch to (a new producer, or a newer
      epoch starting at sequence 0, starts afresh);
    * ``(DUPLICATE, BatchMetadata)``: a retry of a retained batch, with its offsets;
    * ``(TXN_ENDED, message)``: a ``transactional`` batch with the sequence numbers of a
      retained batch from before the producer's open transaction (or with none open): not
      a retry but a copy (see :func:`ended_before_open_transaction`);
    * ``(FENCED, message)``: an epoch older than the partition knows;
    * ``(OUT_OF_ORDER, message)``: a newer epoch not starting at 0, or a sequence that
      does not follow the last one (-1 when the epoch has no batch yet).
    """
    if state is None:
        return APPEND, ProducerState(epoch=epoch)
    if epoch < state.epoch:
        return FENCED, f"producer {producer_id} epoch {epoch} is older than {state.epoch}"
    if epoch > state.epoch:
        if base_sequence != 0:
            return OUT_OF_ORDER, (f"producer {producer_id}: the first batch of epoch {epoch} "
                                  f"must have sequence 0, got {base_sequence}")
        return APPEND, replace(state, epoch=epoch, batches=())
    dup = state.find_batch(base_sequence, last_sequence)
    if dup is not None:
        if transactional and ended_before_open_transaction(state, dup):
            return TXN_ENDED, (f"producer {producer_id} epoch {epoch}: sequence {base_sequence} "
                               f"belongs to a batch of a transaction that already ended here")
        return DUPLICATE, dup
    if base_sequence != (state.last_sequence + 1) & _INT32_MASK:
        return OUT_OF_ORDER, (f"producer {producer_id}: sequence {base_sequence} does not "
                              f"follow {state.last_sequence}")
    return APPEND, state


def ended_before_open_transaction(state: ProducerState, batch: BatchMetadata) -> bool:
    """Whether the producer's retained ``batch`` lies wholly before its open transaction at
    the partition (or it has none open): a transaction that batch was part of has ended.
    (A library writer's flush may hold plain records and then its transaction's first:
    that batch reaches into the open transaction.)

    A transactional batch with that batch's sequence numbers is then no retry: a retry is
    answered before its transaction ends (a client ends a transaction only once every
    batch of it is answered), so it is a client that purged the batch as unsent and reused
    its numbers. Answered as a duplicate, its records would be acknowledged with the ended
    batch's offsets and never written, and its COMMIT would commit nothing here.
    """
    return state.txn_first_offset is None or batch.last_offset < state.txn_first_offset


def entries_with_aborted(entries: Sequence[SegmentEntry],
                         aborted: Iterable[tuple[int, int, int]]) -> list[SegmentEntry]:
    """Record each aborted transaction ``(producer id, first offset, marker offset)`` on the
    segment holding its ABORT marker (Kafka's ``.txnindex``)."""
    aborted = list(aborted)
    if not aborted:
        return list(entries)
    out = []
    for e in entries:
        mine = tuple(t for t in aborted if e.base_offset <= t[2] < e.next_offset)
        out.append(replace(e, aborted_txns=tuple(e.aborted_txns) + mine) if mine else e)
    return out
