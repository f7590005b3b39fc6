"""Fetch and ListOffsets: stored batches served as they are, from one manifest snapshot each.

A partition's fetch starts at the batch the ``.index`` points to for the
fetch offset and walks whole batches (read through the broker's bounded
:class:`~kafkastore.protocol.caches.fetch_cache.RangeCache`) across segments until
the partition's byte limit, stopping before the first batch that reaches the
isolation level's bound (the last stable offset under read_committed, else
the high watermark). The first batch is returned even when larger than the
limit (Kafka's rule, so a consumer can always make progress). Every batch
is checked against the manifest entry it came from: inside the entry's bytes,
offsets inside ``[base_offset, next_offset)``; a mismatch is answered with
KAFKA_STORAGE_ERROR and logged, never served.

Long poll: while the response holds fewer than ``min_bytes`` and
``max_wait_ms`` has not passed, the fetch is parked on its partitions
(:class:`~kafkastore.protocol.caches.data_watch.DataWatch`): woken by this broker's
commits to them, or by the broker's one shared poll of their manifest heads
(other brokers' commits); a parked fetch costs nothing meanwhile.

The handlers serve Fetch v4+ and ListOffsets v1+; :mod:`~kafkastore.protocol.apis.legacy`
registers both keys at every version, its own handlers answering the older ones.
"""
from __future__ import annotations

import logging
import struct

from ...errors import KafkaStoreError
from ...errors import FetchCheckError
from ...manifest import Manifest
from ...read.reader import PartitionReader, last_stable_offset, segment_position
from ...format.record_batch import LOG_OVERHEAD
from ...cluster.acls import Operation, ResourceType
from ..wire import error_codes as E
from ..wire.codec import make
from ..handler_table import RequestContext
from ..caches.topic_ids import NEEDS_LOOKUP

log = logging.getLogger("kafkastore.serve.fetch")

READ_COMMITTED = 1
#: Fetch sessions (KIP-227): a full fetch without a session, and one asking for a new session.
FINAL_EPOCH, INITIAL_EPOCH = -1, 0
#: The first Fetch version naming topics by id (KIP-516).
BY_TOPIC_ID = 13
_OFFSET_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_POS = 23




class PartitionRead:
    """What one partition's fetch found."""

    __slots__ = ("error", "hw", "lso", "log_start", "records", "aborted")

    def __init__(self, error=E.NONE, hw=-1, lso=-1, log_start=-1, records=b"", aborted=None):
        self.error, self.hw, self.lso, self.log_start = error, hw, lso, log_start
        self.records, self.aborted = records, aborted


def read_partition(broker, topic: str, partition: int, offset: int, limit: int,
                   read_committed: bool, refresh: bool) -> PartitionRead:
    """Read whole batches from ``offset`` up to ``limit`` bytes (at least one batch). Blocking."""
    meta = broker.meta.topic(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return PartitionRead(E.UNKNOWN_TOPIC_OR_PARTITION)
    m = broker.meta.manifest(topic, partition, 0 if refresh else None)
    if offset > m.high_watermark and not refresh:
        # Another broker may have committed since the cached read: never answer
        # OFFSET_OUT_OF_RANGE (which makes consumers reset their position) from a stale cache.
        m = broker.meta.manifest(topic, partition, 0)
    hw, start = m.high_watermark, m.log_start_offset
    lso = stable_offset(broker, m) if read_committed else last_stable_offset(m)
    out = PartitionRead(E.NONE, hw, lso, start, b"", () if read_committed else None)
    if offset < start or offset > hw:
        # The consumer resets its position (auto.offset.reset): worth a line.
        log.warning("fetch of %s/%d at offset %d: out of range [%d, %d]", topic, partition,
                    offset, start, hw)
        out.error = E.OFFSET_OUT_OF_RANGE
        return out
    upper = lso if read_committed else hw
    if offset >= upper:
        return out
    chunks: list[bytes] = []
    total = 0
    end_offset = offset
    done = False
    for seg in m.segments_from(offset):
        if done or seg.base_offset >= upper:
            break
        paths = seg.paths(topic, partition)
        # Only the pages of the .index the lookup needs (a segment's index grows with its size).
        pos = segment_position(broker.storage, topic, partition, seg, offset)
        path = paths[".log"]
        while pos < seg.size and not done:
            buf = broker.range_cache.get(path, pos, pos + max(limit - total, LOG_OVERHEAD), seg.size)
            if len(buf) < LOG_OVERHEAD:
                raise FetchCheckError(f"{path}: {len(buf)} stray bytes at {pos} (manifest size {seg.size})")
            i = 0
            while len(buf) - i >= LOG_OVERHEAD:
                base, length = _OFFSET_LENGTH.unpack_from(buf, i)
                size = LOG_OVERHEAD + length
                if length < 49 or pos + i + size > seg.size:
                    raise FetchCheckError(f"{path}: batch at {pos + i} of {size} bytes does not fit "
                                          f"the manifest's size {seg.size}")
                if i + size > len(buf):
                    break
                (delta,) = _LAST_DELTA.unpack_from(buf, i + _LAST_DELTA_POS)
                last = base + delta
                if base < seg.base_offset or last >= seg.next_offset or delta < 0:
                    raise FetchCheckError(f"{path}: batch [{base}, {last}] outside the manifest's "
                                          f"[{seg.base_offset}, {seg.next_offset})")
                if last >= upper or (total and total + size > limit):
                    done = True
                    break
                if last >= offset:
                    chunks.append(buf[i:i + size])
                    total += size
                    end_offset = last + 1
                i += size
            if done:
                break
            if i == 0:
                if total:
                    done = True
                    break
                # Nothing yet and the first batch is larger than the limit: take it whole.
                (length,) = _OFFSET_LENGTH.unpack_from(buf, 0)[1:]
                limit = LOG_OVERHEAD + length
                continue
            pos += i
            done = total >= limit
    out.records = b"".join(chunks)
    if read_committed and chunks:
        out.aborted = tuple((pid, first) for s in m.segments_from(offset) for pid, first, last in s.aborted_txns
                            if last >= offset and first < end_offset)
    return out


def stable_offset(broker, m: Manifest) -> int:
    """The last stable offset a read_committed reader of ``m`` is given: below the open
    transactions and below the transactions of a write job still marking its partitions
    (:class:`~kafkastore.job_commits.PendingJobs`), so a job is seen in all of its
    partitions or in none."""
    lso = last_stable_offset(m)
    cap = broker.meta.pending_jobs.cap(m)
    return lso if cap is None else max(m.log_start_offset, min(lso, cap))


async def handle_fetch(ctx: RequestContext, request):
    """Fetch v4-17: partitions read from one manifest snapshot each, long-polled up to
    ``max_wait``; v13+ names topics by id (:mod:`~kafkastore.protocol.caches.topic_ids`)."""
    broker = ctx.broker
    if getattr(request, "session_epoch", FINAL_EPOCH) not in (FINAL_EPOCH, INITIAL_EPOCH):
        # No fetch sessions are kept (KIP-227 lets a broker decline them: every answer says
        # session 0, so clients send full fetches); an incremental fetch names a session that
        # does not exist, which Kafka answers FETCH_SESSION_ID_NOT_FOUND with no topics.
        return make(ctx.response_class, error_code=E.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=())
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_wait = request.max_wait.total_seconds()
    deadline = broker.clock.monotonic_s() + max_wait
    max_bytes = getattr(request, "max_bytes", 0x7FFFFFFF)
    targets = await _targets(ctx, request.topics)
    # Unknown topic ids (v13+) and topics the principal may not read are answered with their
    # error for every partition asked; the others are fetched (and long-polled) as usual.
    unknown = [t for t in targets if t[0] is None]
    denied = [t for t in targets if t[0] is not None
              and not ctx.authorize(Operation.READ, ResourceType.TOPIC, t[0])]
    topics = targets
    if unknown or denied:
        gone = {id(t) for t in unknown + denied}
        topics = [t for t in targets if id(t) not in gone]
    tps = [(name, p.partition) for name, _, parts in topics for p in parts]
    while True:
        since = broker.data_watch.generations(tps)
        results = await ctx.run(_read_all, broker, topics, max_bytes, read_committed, False)
        size = sum(len(r.records) for _, _, parts in results for _, r in parts)
        errors = any(r.error != E.NONE for _, _, parts in results for _, r in parts)
        remaining = deadline - broker.clock.monotonic_s()
        if size >= request.min_bytes or errors or remaining <= 0 or size > 0 and request.min_bytes <= 1:
            break
        # Parked until a partition of this fetch gets data (this broker's commit, or another
        # broker's seen by the shared poller, both of which leave the manifest cache current)
        # or the wait ends: nothing runs for it meanwhile.
        if not await broker.data_watch.wait(tps, since, remaining):
            break
    results += [(name, tid, [(p.partition, PartitionRead(code)) for p in parts])
                for code, group in ((E.UNKNOWN_TOPIC_ID, unknown), (E.TOPIC_AUTHORIZATION_FAILED, denied))
                for name, tid, parts in group]
    mod = ctx.response_module
    responses = []
    for topic, tid, parts in results:
        out = []
        for p, r in parts:
            aborted = None if r.aborted is None else tuple(
                make(mod, "AbortedTransaction", producer_id=pid, first_offset=first) for pid, first in r.aborted)
            out.append(make(mod, "PartitionData", partition_index=p, error_code=r.error,
                            high_watermark=r.hw, last_stable_offset=r.lso, log_start_offset=r.log_start,
                            aborted_transactions=aborted, preferred_read_replica=-1,
                            records=r.records))
        responses.append(make(mod, "FetchableTopicResponse", topic=topic, topic_id=tid, partitions=tuple(out)))
    # v16's NodeEndpoints name the new leaders of NOT_LEADER_OR_FOLLOWER partitions (KIP-951):
    # every broker serves every partition, so that error and the field's entries never occur.
    return make(ctx.response_class, error_code=E.NONE, session_id=0, responses=tuple(responses))


async def _targets(ctx: RequestContext, topics) -> list[tuple[str | None, object, tuple]]:
    """``(name, topic id, partitions)`` per requested topic: v13+ names topics by id (KIP-516),
    resolved through the broker's id index (a dict lookup per topic; name None: unknown id).
    Earlier versions name them (id None)."""
    if ctx.api_version < BY_TOPIC_ID:
        return [(t.topic, None, t.partitions) for t in topics]
    index = ctx.broker.meta.topic_ids
    found = [index.resolve_cached(t.topic_id) if t.topic_id is not None else None for t in topics]
    if any(f is NEEDS_LOOKUP for f in found):
        found = await ctx.run(_resolve, index, [t.topic_id for t in topics], found)
    return [(f[0] if f is not None else None, t.topic_id, t.partitions) for t, f in zip(topics, found)]


def _resolve(index, ids, found):
    return [index.resolve(tid) if f is NEEDS_LOOKUP else f for tid, f in zip(ids, found)]


def _read_all(broker, topics, max_bytes: int, read_committed: bool, refresh: bool):
    results = []
    budget = max_bytes
    if read_committed:
        _note_manifests(broker, topics)
    for name, tid, partitions in topics:
        parts = []
        for p in partitions:
            limit = max(0, min(p.partition_max_bytes, budget))
            try:
                if limit == 0:
                    r = read_partition(broker, name, p.partition, p.fetch_offset, 1,
                                       read_committed, refresh)
                    r.records, r.aborted = b"", (() if read_committed else None)
                else:
                    r = read_partition(broker, name, p.partition, p.fetch_offset, limit,
                                       read_committed, refresh)
            except FetchCheckError as exc:
                log.error("refusing to serve %s/%d: %s", name, p.partition, exc)
                r = PartitionRead(E.KAFKA_STORAGE_ERROR)
            except KafkaStoreError as exc:
                log.warning("fetch of %s/%d failed: %s", name, p.partition, exc)
                r = PartitionRead(E.KAFKA_STORAGE_ERROR)
            budget -= len(r.records)
            parts.append((p.partition, r))
        results.append((name, tid, parts))
    return results


def _note_manifests(broker, topics) -> None:
    """Show the request's manifests to the pending-jobs view before any is capped, so one
    listing of the pending jobs (if one is needed at all) covers the whole request."""
    for name, _, partitions in topics:
        meta = broker.meta.topic(name)
        for p in partitions:
            if meta is not None and 0 <= p.partition < meta.partitions:
                try:
                    broker.meta.pending_jobs.note(broker.meta.manifest(name, p.partition))
                except KafkaStoreError:
                    pass   # read_partition meets it again and answers the error


# -- ListOffsets ---------------------------------------------------------------

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
#: KIP-405's specs (v8+, v9+): everything is in the one store, which is "local", and nothing is
#: tiered (as Kafka without remote storage: earliest-local is the log start, latest-tiered -1).
EARLIEST_LOCAL, LATEST_TIERED = -4, -5


def list_offset(broker, topic: str, partition: int, timestamp: int,
                read_committed: bool) -> tuple[int, int, int]:
    """``(error, timestamp, offset)`` as ListOffsets answers for one partition. Blocking."""
    meta = broker.meta.topic(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
    m: Manifest = broker.meta.manifest(topic, partition, 0)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return E.NONE, -1, m.log_start_offset
    if timestamp == LATEST_TIERED:
        return E.NONE, -1, -1
    # Kafka's Partition.fetchOffsetForTimestamp: lookups answer only offsets a consumer of this
    # isolation level may fetch (below the last stable offset for read_committed).
    fetchable = stable_offset(broker, m) if read_committed else m.high_watermark
    if timestamp == LATEST:
        return E.NONE, -1, fetchable
    if timestamp == MAX_TIMESTAMP:
        best = max(m.segments, key=lambda s: s.max_timestamp, default=None)
        if best is None or best.max_timestamp < 0:
            return E.NONE, -1, -1
        offset = max(best.max_timestamp_offset, m.log_start_offset)
        return (E.NONE, best.max_timestamp, offset) if offset < fetchable else (E.NONE, -1, -1)
    if timestamp < 0:
        return E.INVALID_REQUEST, -1, -1
    reader = PartitionReader(broker.storage, topic, partition, manifest=m)
    offset = reader.offset_for_timestamp(timestamp)
    if offset >= fetchable:
        return E.NONE, -1, -1
    table = reader.read(offset, offset + 1, isolation="read_uncommitted", include_headers=False)
    ts = table.column("timestamp")[0].as_py() if table.num_rows else None
    return E.NONE, int(ts.timestamp() * 1000) if ts is not None else timestamp, offset


async def handle_list_offsets(ctx: RequestContext, request):
    mod = ctx.response_module
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in request.topics:
        parts = []
        describe = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            try:
                err, ts, off = (E.TOPIC_AUTHORIZATION_FAILED, -1, -1) if not describe else \
                    await ctx.run(list_offset, ctx.broker, t.name, p.partition_index,
                                  p.timestamp, read_committed)
            except KafkaStoreError as exc:
                log.warning("list offsets of %s/%d failed: %s", t.name, p.partition_index, exc)
                err, ts, off = E.KAFKA_STORAGE_ERROR, -1, -1
            parts.append(make(mod, "ListOffsetsPartitionResponse", partition_index=p.partition_index,
                              error_code=err, timestamp=ts, offset=off, leader_epoch=0))
        topics.append(make(mod, "ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return make(ctx.response_class, topics=tuple(topics))

