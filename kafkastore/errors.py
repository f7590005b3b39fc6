"""Every error kafkastore and its jobs raise on purpose derives from :class:`KafkaStoreError`.

The CLI catches that one class and prints its message on a single line; anything
else is a bug and keeps its traceback.

One tree, each class defined once, here: the log's errors, the protocol
server's and the jobs' (``pipelines/`` defines no error classes of its own,
see docs/ARCHITECTURE.md). One condition is one type.
"""
from __future__ import annotations


class KafkaStoreError(Exception):
    """Root of all errors raised by kafkastore and pipelines."""


class ConfigError(KafkaStoreError, ValueError):
    """A bad option, config value, URL or argument; the message shows the expected shape."""


class CorruptRecordError(KafkaStoreError):
    """Bytes that are not a valid Kafka record batch.

    ``segment``, ``offset`` and ``position`` locate the damage when known
    (``offset`` is the batch's base offset, ``position`` its byte position).
    """

    def __init__(self, message: str, *, segment: str | None = None,
                 offset: int | None = None, position: int | None = None):
        self.reason = message
        self.segment = segment
        self.offset = offset
        self.position = position
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.segment is not None:
            where.append(f"segment {self.segment}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.position is not None:
            where.append(f"position {self.position}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def located(self, *, segment: str | None = None, offset: int | None = None,
                position: int | None = None) -> "CorruptRecordError":
        """Return a copy of this error with the missing location fields filled in."""
        return type(self)(
            self.reason,
            segment=self.segment if self.segment is not None else segment,
            offset=self.offset if self.offset is not None else offset,
            position=self.position if self.position is not None else position,
        )


class CrcMismatchError(CorruptRecordError):
    """A batch whose stored CRC-32C does not match its bytes."""


class SegmentMismatchError(CorruptRecordError):
    """A segment object whose bytes disagree with its manifest entry (size, record count,
    checksum, offsets outside the listed range, an index entry that points at the wrong
    batch): damaged or replaced. Readers refuse it rather than return other data."""


class TruncatedBatchError(CorruptRecordError):
    """A batch (or batch header) cut short by the end of the bytes."""


class OffsetOrderError(CorruptRecordError):
    """An intact batch whose offsets do not continue the segment (backwards or below its base)."""


class UnsupportedFormatError(CorruptRecordError):
    """An intact message in Kafka's legacy format (magic 0 or 1), which kafkastore does not read."""


class SegmentOffsetOverflowError(CorruptRecordError):
    """A batch whose last offset is more than 2^31-1 past the segment's base offset.

    Kafka's ``LogSegmentOffsetOverflowException``: the writer must roll a new
    segment before appending it (see :meth:`kafkastore.format.segment_build.SegmentBuilder.can_append`).
    """


class CorruptIndexError(CorruptRecordError):
    """An ``.index`` or ``.timeindex`` that is not valid for its log.

    Never fatal for the data: the caller rebuilds the index from the log
    (see :func:`kafkastore.format.segment_indexes.load_indexes`).
    """


class CompressionError(KafkaStoreError):
    """Unknown codec, or a compressed payload that does not decompress."""


class RecordTooLargeError(KafkaStoreError):
    """A record or batch over the topic's ``max.message.bytes``."""


class OffsetOutOfRangeError(KafkaStoreError):
    """A fetch offset outside ``[log_start_offset, high_watermark]``.

    The message ends with both bounds unless ``bounds_in_message=False`` (for
    messages that already state them)."""

    def __init__(self, message: str, *, log_start_offset: int, high_watermark: int,
                 bounds_in_message: bool = True):
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        super().__init__(
            f"{message} (log start offset {log_start_offset}, high watermark {high_watermark})"
            if bounds_in_message else message)


class DataLossError(OffsetOutOfRangeError):
    """Offsets a reader or a load still needed were deleted (retention, delete-records)
    before it read them. Raised by the data source (``failOnDataLoss``) and by load
    planning (``on_data_loss: fail``)."""


class UnknownTopicError(KafkaStoreError):
    """The topic (or partition) does not exist under the root."""


class TopicDeletedError(UnknownTopicError):
    """A write to a partition whose manifest carries a deletion tombstone: the topic was deleted
    (perhaps by another broker) after the writer looked it up. Nothing of the write was committed."""


class InternalTopicError(ConfigError):
    """A client write, delete or create of an internal topic (a name starting with ``__`` that
    kafkastore owns, e.g. ``__consumer_offsets``): only kafkastore itself writes those."""


class TopicExistsError(KafkaStoreError):
    """``topics create`` for a topic that is already there."""


class InvalidPartitionsError(ConfigError):
    """A partition count change that does not apply to the topic as it is now (fewer
    partitions, or, for Kafka's CreatePartitions, not more): Kafka's INVALID_PARTITIONS."""


class UnknownGroupError(KafkaStoreError):
    """A consumer group with no metadata and no committed offsets under the root."""


class GroupNotEmptyError(KafkaStoreError):
    """A consumer-group change refused because the group still has live members."""


class StorageError(KafkaStoreError):
    """The object store failed (network, permissions, missing object)."""


class StoragePermissionError(StorageError):
    """The store refused the operation (permissions, credentials): a definite failure, so a
    refused write did not happen (its outcome is known, unlike a lost response)."""


class BucketNotFoundError(StoragePermissionError):
    """The root's bucket does not exist (a misspelt or deleted bucket): every read, list and
    write under the root fails. A definite failure like a refused write (nothing was written),
    not an unknown outcome, and not an empty root or a missing object."""


class CommitConflict(StorageError):
    """Put-if-absent lost the race: the version already exists. Re-read, re-validate, retry."""


class CommitGaveUpError(CommitConflict):
    """The commit engine gave up: every attempt its budget allowed (attempts or time) lost the
    race to other writers. Nothing of this commit was written; try again later. The one
    give-up error of every commit (manifest, producer ids, topics, the warehouse)."""


class ReadBeforePutError(StorageError):
    """A read a commit makes just before its put (the probe for a hole in the chain) failed:
    the put was not sent. A definite failure, as a failed read of the head is, never an
    unknown outcome of the put."""


class CommitUnknownError(StorageError):
    """A commit whose outcome could not be decided even by reading back."""


class InvalidUpdateError(KafkaStoreError, ValueError):
    """An update that would break a manifest invariant (overlap, gap, offsets moving backwards...)."""


class RequirementFailedError(KafkaStoreError):
    """A commit's precondition does not hold on the current manifest: re-plan against the new state."""


class CorruptMetadataError(KafkaStoreError):
    """A stored manifest (or ``_topic.json``) that cannot be parsed or breaks an invariant."""


class ManifestGapError(CorruptMetadataError):
    """A partition's manifest chain has a hole: a version is missing while a later one is
    stored (a partial restore, out-of-order replication). Reading the versions before the
    hole would return older state and writing would fork the chain, so readers, writers,
    expiry and gc refuse the partition; the message names it and the missing version."""


class ClusterDocumentError(CorruptMetadataError):
    """A stored version of a shared cluster document (quotas, ACLs, credentials under
    ``<root>/_cluster/``) that cannot be parsed; the message names the document and version."""


class TxnStateFencedError(KafkaStoreError):
    """A write of a transaction's coordinator state would not apply to the state it was
    planned on: another coordinator (this broker while it was paused, or another broker)
    wrote the id's state since. Nothing was written; the caller reads again (clients get a
    retriable error and retry, re-reading the coordinator)."""


class ClockSkewError(KafkaStoreError):
    """This process's clock disagrees with the store's by more than the tolerated skew, so
    nothing that decides by age (gc's deletes, version expiry) may run: a clock ahead would
    delete live files. Fix the clock (NTP); nothing was deleted."""


class StaleUploadError(KafkaStoreError):
    """A commit would list a newly written segment file that is older than half the GC grace
    floor, or already gone: GC may delete such a file, so the commit is refused before it lands.

    ``segment_ids`` are the offending new segments; the writer may upload them again under
    new ids and retry, or abort. Nothing was committed.
    """

    def __init__(self, message: str, *, segment_ids: tuple[str, ...] = ()):
        self.segment_ids = tuple(segment_ids)
        super().__init__(message)


class ProduceStoppedError(KafkaStoreError):
    """A produce run that stopped part way: the message says which records were committed."""


class FencedError(KafkaStoreError):
    """A writer whose epoch is older than the manifest's: it must stop writing."""


class DuplicateSequenceError(KafkaStoreError):
    """An idempotent producer retried a batch that is already in the log."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object does not exist in the store."""


class InvalidRecordError(KafkaStoreError):
    """A record the topic refuses (e.g. a null key on a compacted topic)."""


class OutOfOrderSequenceError(KafkaStoreError):
    """An idempotent producer batch whose sequence does not follow the last one written."""


class ListenError(KafkaStoreError):
    """A broker cannot listen on its address (in use, not permitted, unknown host)."""


# -- the protocol server (kafkastore/protocol/) ----------------------------------------------

class ProtocolError(KafkaStoreError):
    """A request the server cannot decode (bad frame, header or body): the connection is closed."""


class DuplicateApiError(KafkaStoreError):
    """A second handler registered for an API key the handler table already serves (each
    key is registered once, old and new versions by one handler)."""


class FetchCheckError(KafkaStoreError):
    """A stored batch that does not agree with its manifest entry."""


class BatchRejected(KafkaStoreError):
    """A produced batch the broker refuses; ``code`` is the Kafka error code for the client."""

    def __init__(self, code: int, message: str):
        self.code = code
        super().__init__(message)


# -- the jobs (pipelines/) ---------------------------------------------------------------------

class WarehouseError(KafkaStoreError):
    """A warehouse commit that is refused (overlap, gap) or a table that is not a table."""


class OffsetOverlapError(WarehouseError):
    """A warehouse commit whose range starts below the table's committed offset (already loaded)."""


class OffsetGapError(WarehouseError):
    """A warehouse commit whose range starts above the table's committed offset (offsets skipped)."""


class TableChangedError(WarehouseError):
    """The table's offsets moved since the job planned (e.g. a load landed during a reprocess)."""


class TableNotFoundError(WarehouseError):
    """The warehouse or the table does not exist."""


class SchemaEvolutionError(WarehouseError):
    """New data whose schema cannot be merged into the table's (an incompatible change)."""


class MissingDataFileError(WarehouseError):
    """A data file a table's snapshot lists is gone (deleted outside Iceberg)."""


class ExpiredSnapshotError(WarehouseError):
    """Time travel to a time whose snapshot was expired (by vacuum): the table had rows
    then, but they can no longer be read."""


class IncompatibleSchemaError(SchemaEvolutionError):
    """A load with ``onIncompatible=fail`` met records whose writer schema the table
    cannot take (e.g. a column's type changed in a way Iceberg forbids)."""


class UnmappableSchemaError(KafkaStoreError, ValueError):
    """A writer schema (or part of it) with no Iceberg type (a recursive type, a decimal
    wider than 38 digits): its records are dead letters with the reason."""


class DebeziumValueError(KafkaStoreError, ValueError):
    """A value in one of Debezium's encodings (days, epoch units, a time of day, zoned
    text, a decimal's bytes) that its column cannot hold: a dead letter's reason."""


class IncompatibleChangeError(SchemaEvolutionError, ValueError):
    """Two types (a table's column and a writer schema's field) that no Iceberg schema
    change reconciles; the message names the field's path."""


class RegistryFetchError(KafkaStoreError):
    """A load could not get a writer schema from a schema registry (unknown id, registry
    unreachable); ``status`` is the HTTP status when the registry answered."""

    def __init__(self, message: str, *, status: int | None = None):
        self.status = status
        super().__init__(message)


class OrphanedTableError(WarehouseError):
    """The catalog has no entry for a table whose location holds Iceberg metadata (e.g. a
    lost ``catalog.db``): creating a new table there would start again from offset 0."""


class UnsupportedDeletesError(WarehouseError):
    """A snapshot with delete files that the reader cannot apply (refused, never ignored)."""


class QualityCheckFailed(WarehouseError):
    """A snapshot failed its quality checks; ``result`` holds the details
    (a :class:`pipelines.quality.QualityResult`)."""

    def __init__(self, message: str, result):
        super().__init__(message)
        self.result = result


class MissingExtraError(ConfigError):
    """A command that needs an optional part of the install (``kafkastore[spark]``,
    ``kafkastore[airflow]``) that is not installed; the message names the extra."""


class TableNameCollisionError(ConfigError):
    """A load of many topics (or route values) would put two of them into one table: their
    names map to the same Iceberg identifier; the message names both."""


class UnroutableRecordsError(KafkaStoreError):
    """A route-by-field load found records whose field value has no table (null, not
    decodable, or outside the allowed values) and no default table was given."""


class LoadsFailedError(KafkaStoreError):
    """A load of many tables in which some tables' loads failed (the others committed);
    the message names each failed table and its cause."""


class TopicSinkError(KafkaStoreError):
    """A Spark write into topics could not commit: nothing of the job became readable."""


class SparkJobError(KafkaStoreError):
    """A Spark job failed; the message names command, table, partition, segment and cause,
    and the log file with the full trace (``log_path``)."""

    def __init__(self, message: str, *, log_path: str | None = None, cause_type: str | None = None):
        self.log_path = log_path
        self.cause_type = cause_type
        super().__init__(message)


# -- the schema registry (kafkastore/schema_registry/) --------------------------------------

class SchemaRegistryError(KafkaStoreError):
    """A schema registry request refused with Confluent's error body: ``status`` is the HTTP
    status, ``error_code`` Confluent's code (40401 subject not found, 42201 invalid schema...)."""

    def __init__(self, status: int, error_code: int, message: str):
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


class InvalidAclError(ConfigError):
    """An ACL binding or filter that is not valid (unknown resource type, pattern, operation or
    permission, a bad principal, host or resource name); brokers answer INVALID_REQUEST."""


class ScramCredentialError(ConfigError):
    """A SCRAM credential change or lookup refused (``kafkastore users``, AlterUserScramCredentials).

    ``kind`` says why, as Kafka's error codes do: ``"mechanism"`` (not SCRAM-SHA-256/512),
    ``"unacceptable"`` (empty name or salt, iterations outside 4096..16384), ``"not_found"``
    (no such credential) or ``"duplicate"`` (one credential changed twice in a request).
    """

    def __init__(self, message: str, *, kind: str = "unacceptable"):
        self.kind = kind
        super().__init__(message)
