"""Produce v0-2, Fetch v0-3 (and ListOffsets v0): the old message format (magic 0/1) at the edges.

Kafka 3.9 still serves these versions (clients pinned to 0.9 / 0.10 brokers send them), and
so do we, the way Kafka does with its default message format (v2 on disk):

* Produce v0-2 carries a magic 0/1 message set per partition. :func:`up_convert_request`
  turns each into one v2 batch (:func:`kafkastore.format.legacy_records.up_convert`)
  before the request takes the normal produce path (:mod:`.apis.produce`), so offsets,
  commits and acks (acks=0 included) work exactly as for newer versions; a set that does
  not decode is answered CORRUPT_MESSAGE for its partition.
* Fetch v0-3 reads stored v2 batches as Fetch v4+ does under read_uncommitted (the old
  versions have no isolation level: everything up to the high watermark, aborted
  transactional data included, no aborted list) and down-converts them
  (:func:`~kafkastore.format.legacy_records.down_convert`): magic 0 for v0-1, magic 1 for
  v2-3, transaction markers dropped, zstd answered UNSUPPORTED_COMPRESSION_TYPE. Sizes
  are counted after conversion: v0-2 return whole messages up to the partition limit, or
  a partial first message when even that one does not fit (pre-KIP-74, the consumer must
  raise its fetch size); v3 returns the first message whole and honours the request's
  ``max_bytes`` across partitions (KIP-74).

ListOffsets v0 (old-style offsets, what 0.9 / 0.10 consumers reset their position with) is
answered by :func:`old_style_offsets`.

:func:`register` registers Fetch and ListOffsets once each, at every version: the old
versions by the handlers here, newer ones by ``apis.fetch``'s (one plain call in between).
"""
from __future__ import annotations

import dataclasses
import logging
import struct

from ...cluster.acls import Operation, ResourceType
from ...errors import CompressionError, CorruptRecordError, FetchCheckError, KafkaStoreError
from ...format import legacy_records
from ...format.record_batch import LOG_OVERHEAD
from ..wire import error_codes as E
from ..wire.api_keys import FETCH, LIST_OFFSETS
from ..wire.error_codes import UNSUPPORTED_COMPRESSION_TYPE
from .fetch import PartitionRead, handle_fetch, handle_list_offsets, read_partition
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext, by_version

log = logging.getLogger("kafkastore.serve.fetch")

EARLIEST, LATEST = -2, -1
#: The oldest Fetch version kio (and so ``apis.fetch``) has classes for.
FIRST_NEW_FETCH = 4
_INT32_MAX = 0x7FFFFFFF
_OFFSET_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
LAST_OFFSET_DELTA_OFFSET = struct.calcsize(">qiibIh")  # 23, in a v2 batch


# -- Produce v0-2 ---------------------------------------------------------------------

def up_convert_request(request) -> tuple[object, dict]:
    """``request`` with every partition's message set replaced by one v2 batch, and
    ``{(topic, partition): (error, message)}`` for the sets that did not decode (their
    records left empty; the caller answers them the error). Blocking (decompression)."""
    refused: dict = {}
    topics = []
    for t in request.topic_data:
        parts = []
        for pd in t.partition_data:
            data = pd.records
            if data:
                try:
                    data = legacy_records.up_convert(data)
                except (CorruptRecordError, CompressionError) as exc:
                    refused[(t.name, pd.index)] = (E.CORRUPT_MESSAGE, f"bad message set: {exc}")
                    data = None
            parts.append(dataclasses.replace(pd, records=data))
        topics.append(dataclasses.replace(t, partition_data=tuple(parts)))
    return dataclasses.replace(request, topic_data=tuple(topics)), refused


# -- Fetch v0-3 -----------------------------------------------------------------------

def _next_offset(batches) -> int:
    """The offset after the last of some concatenated v2 batches."""
    pos = last = 0
    while pos + LOG_OVERHEAD <= len(batches):
        base, length = _OFFSET_LENGTH.unpack_from(batches, pos)
        (delta,) = _I32.unpack_from(batches, pos + LAST_OFFSET_DELTA_OFFSET)
        last = base + delta + 1
        pos += LOG_OVERHEAD + length
    return last


def read_old(broker, topic: str, partition: int, offset: int, limit: int, magic: int,
             first_whole: bool) -> PartitionRead:
    """One partition of an old fetch: stored batches read under read_uncommitted and
    down-converted to ``magic``, at most ``limit`` bytes after conversion (see the module
    docstring for the first message). Blocking."""
    start = offset
    while True:
        r = read_partition(broker, topic, partition, start, limit, False, False)
        if r.error != E.NONE or not r.records:
            return r
        converted = legacy_records.down_convert(r.records, magic, offset)
        if converted.units or converted.unsupported:
            break
        # Only markers, or records before the fetch offset (nothing for an old client):
        # read on, so a consumer is never answered empty in front of data it can read.
        nxt = _next_offset(r.records)
        if nxt <= start:
            break
        start = nxt
    if converted.unsupported and not converted.units:
        return PartitionRead(UNSUPPORTED_COMPRESSION_TYPE, r.hw, r.lso, r.log_start)
    out = PartitionRead(E.NONE, r.hw, r.lso, r.log_start)
    out.records = legacy_records.fit(converted.units, limit, first_whole=first_whole)
    return out


def _read_all(broker, topics, max_bytes: int, magic: int, first_whole: bool):
    results = []
    budget = max_bytes
    for t in topics:
        parts = []
        for p in t.partitions:
            limit = max(0, min(p.partition_max_bytes, budget))
            try:
                if limit == 0:
                    r = read_partition(broker, t.topic, p.partition, p.fetch_offset, 1, False, False)
                    r.records = b""
                else:
                    r = read_old(broker, t.topic, p.partition, p.fetch_offset, limit, magic, first_whole)
            except FetchCheckError as exc:
                log.error("refusing to serve %s/%d: %s", t.topic, p.partition, exc)
                r = PartitionRead(E.KAFKA_STORAGE_ERROR)
            except (KafkaStoreError, ValueError) as exc:
                log.warning("fetch of %s/%d failed: %s", t.topic, p.partition, exc)
                r = PartitionRead(E.KAFKA_STORAGE_ERROR)
            budget -= len(r.records)
            parts.append((p.partition, r))
        results.append((t.topic, parts))
    return results


async def handle_old_fetch(ctx: RequestContext, request):
    """Fetch v0-3: as Fetch v4+ under read_uncommitted (long poll included), down-converted."""
    broker = ctx.broker
    magic = legacy_records.MAGIC_V0 if ctx.api_version < 2 else legacy_records.MAGIC_V1
    first_whole = ctx.api_version >= 3
    max_bytes = getattr(request, "max_bytes", _INT32_MAX)
    deadline = broker.clock.monotonic_s() + request.max_wait.total_seconds()
    denied = [t for t in request.topics if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t.topic)]
    gone = {id(t) for t in denied}
    topics = [t for t in request.topics if id(t) not in gone]
    tps = [(t.topic, p.partition) for t in topics for p in t.partitions]
    while True:
        since = broker.data_watch.generations(tps)
        results = await ctx.run(_read_all, broker, topics, max_bytes, magic, first_whole)
        size = sum(len(r.records) for _, parts in results for _, r in parts)
        errors = any(r.error != E.NONE for _, parts in results for _, r in parts)
        remaining = deadline - broker.clock.monotonic_s()
        if size >= request.min_bytes or errors or remaining <= 0 or size > 0 and request.min_bytes <= 1:
            break
        if not await broker.data_watch.wait(tps, since, remaining):
            break
    results += [(t.topic, [(p.partition, PartitionRead(E.TOPIC_AUTHORIZATION_FAILED)) for p in t.partitions])
                for t in denied]
    mod = ctx.response_module
    responses = tuple(
        make(mod, "FetchableTopicResponse", topic=topic, partitions=tuple(
            make(mod, "PartitionData", partition_index=p, error_code=r.error, high_watermark=r.hw,
                 records=r.records) for p, r in parts))
        for topic, parts in results)
    return make(ctx.response_class, responses=responses)


# -- ListOffsets v0 ---------------------------------------------------------------------

def old_style_offsets(broker, topic: str, partition: int, timestamp: int,
                      max_num_offsets: int) -> tuple[int, tuple[int, ...]]:
    """``(error, offsets)`` as Kafka's ListOffsets v0 (``legacyFetchOffsetsForTimestamp``):
    earliest (-2) is the log start offset; otherwise the candidates are each live segment's
    base offset, "last modified" at its max timestamp, then the high watermark, modified
    now; the answer is the latest candidate modified at or before ``timestamp`` (latest, -1:
    the high watermark) and those before it, newest first, at most ``max_num_offsets``.
    Blocking."""
    meta = broker.meta.topic(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return E.UNKNOWN_TOPIC_OR_PARTITION, ()
    if max_num_offsets < 0:
        return E.INVALID_REQUEST, ()
    m = broker.meta.manifest(topic, partition, 0)
    if timestamp == EARLIEST:
        return E.NONE, (m.log_start_offset,)[:max_num_offsets]
    live = [s for s in m.segments if s.next_offset > m.log_start_offset]
    if timestamp == LATEST:
        candidates = [max(s.base_offset, m.log_start_offset) for s in live] + [m.high_watermark]
    else:
        # The high watermark's "modification time" is now: never before a past timestamp.
        candidates = [max(s.base_offset, m.log_start_offset) for s in live if s.max_timestamp <= timestamp]
    out = tuple(dict.fromkeys(reversed(candidates)))  # newest first, no repeats
    return E.NONE, out[:max_num_offsets]


async def handle_old_list_offsets(ctx: RequestContext, request):
    """ListOffsets v0 (the version 0.9 / 0.10 consumers reset their position with)."""
    mod = ctx.response_module
    topics = []
    for t in request.topics:
        describe = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions:
            try:
                err, offsets = (E.TOPIC_AUTHORIZATION_FAILED, ()) if not describe else await ctx.run(
                    old_style_offsets, ctx.broker, t.name, p.partition_index, p.timestamp,
                    p.max_num_offsets)
            except KafkaStoreError as exc:
                log.warning("list offsets of %s/%d failed: %s", t.name, p.partition_index, exc)
                err, offsets = E.KAFKA_STORAGE_ERROR, ()
            parts.append(make(mod, "ListOffsetsPartitionResponse", partition_index=p.partition_index,
                              error_code=err, old_style_offsets=offsets))
        topics.append(make(mod, "ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return make(ctx.response_class, topics=tuple(topics))


def register(registry: HandlerTable) -> None:
    """Serve Fetch and ListOffsets from v0, one registration each: the old versions here,
    newer ones by api_fetch (Kafka 3.9's)."""
    registry.serve(FETCH, by_version(FIRST_NEW_FETCH, handle_old_fetch, handle_fetch))
    registry.serve(LIST_OFFSETS, by_version(1, handle_old_list_offsets, handle_list_offsets))
