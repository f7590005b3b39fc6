"""Exactly-once writes into topics from many tasks: the commit protocol of the topic sink.

The Spark side is :mod:`pipelines.sink.writer`; this module holds everything that decides
what becomes readable, with no Spark in it (see docs/DESIGN.md, "Writes into topics").

* **Tasks** (:func:`write_task`) append their rows as one *transaction* of their own: a
  :class:`~kafkastore.broker.Broker` with a producer id made of the job's 30-bit prefix and
  Spark's task attempt id (unique in the application), epoch 0, transactional batches
  committed through the partition's ordinary conditional manifest commit. No marker is
  written, so read_committed readers see nothing of it (the last stable offset stops at its
  first record). The task returns the topic-partitions it wrote.
* **The driver** (:func:`commit_job`) gets one message per Spark partition, from the
  attempt Spark chose. It aborts every other open transaction of the job's prefix (failed
  and speculative attempts) with ABORT markers at epoch 1, which also fences those
  attempts should they still be running; checks the chosen transactions are still open;
  stores the *decision record* ``_sink/...json`` with put-if-absent (the commit point);
  then writes a COMMIT marker for each chosen transaction, in each partition from the
  newest transaction to the oldest, so the partition's last stable offset passes all of
  the job's records at once.
* **A crash after the decision** leaves a record whose markers are not all written:
  :func:`~kafkastore.job_commits.complete` writes the missing ones, and every later writer
  on the root (and the next start of a stream) runs it first (:func:`recover_jobs`).
* **Readers never see a partial job**: the markers are written under a *pending* object
  (:mod:`kafkastore.job_commits`) that every planning reader rolls forward first, and a
  reader retakes a snapshot a job finished marking under.
* **Streams** name the record after the sink and the micro-batch id, and take the
  producer-id prefix from them (:func:`stream_prefix`): a batch whose record exists was
  committed by an earlier run, so the replay's own transactions are aborted and nothing is
  added; a batch a dead run left half-written is replayed under the same prefix, and its
  commit aborts the dead attempts with the other losers (:func:`commit_job` with
  ``batch_id``).
"""
from __future__ import annotations

import hashlib
import json
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.clock import SYSTEM, Clock
from kafkastore.job_commits import complete
from kafkastore.errors import (CommitConflict, ConfigError, KafkaStoreError, StorageError,
                               TopicSinkError,
                               UnknownTopicError)
from kafkastore.storage import Storage
from kafkastore.topics.admin import load_topic
from kafkastore.write.transactions import open_transactions

from ..progress_line import progress_line

#: Directory under the root holding decision records and attempt notes.
SINK_DIR = "_sink"
RECORD_FORMAT = 1
#: Epoch of the tasks' transactions; aborts are written one higher to fence late attempts.
TASK_EPOCH = 0
ABORT_EPOCH = TASK_EPOCH + 1
_PREFIX_BITS = 30
_ATTEMPT_BITS = 32
#: Stream decision records kept per sink (a restart replays only the last batch).
KEEP_STREAM_RECORDS = 20
#: A task prints its progress line at most this often (and once at its end), as the load.
PROGRESS_INTERVAL_S = 10.0


def new_job_prefix() -> int:
    """A random non-zero 30-bit prefix for one job (or one run of a stream query)."""
    return (uuid.uuid4().int % ((1 << _PREFIX_BITS) - 1)) + 1


def producer_id(prefix: int, task_attempt_id: int) -> int:
    """The producer id of one task attempt: the job's prefix and Spark's attempt id (unique
    within the application), a positive 62-bit number."""
    return (prefix << _ATTEMPT_BITS) | (task_attempt_id & ((1 << _ATTEMPT_BITS) - 1))


def prefix_of(pid: int) -> int:
    """The job prefix a producer id was made from."""
    return pid >> _ATTEMPT_BITS


@dataclass(frozen=True)
class TaskResult:
    """What one task attempt wrote: its producer id and the topic-partitions it touched
    (the commit message's content)."""

    producer_id: int
    partitions: tuple[tuple[str, int], ...]
    records: int
    #: ``(topic, partition, records, bytes of keys and values)`` per partition written.
    sizes: tuple[tuple[str, int, int, int], ...] = ()


class _Tally:
    """Records and key+value bytes per topic-partition, with the progress line of a task
    (every :data:`PROGRESS_INTERVAL_S` and at its end)."""

    def __init__(self, label: str, out=None, clock: Clock = SYSTEM):
        self.label, self.out, self.clock = label, out, clock
        self.records: dict[tuple[str, int], int] = {}
        self.bytes: dict[tuple[str, int], int] = {}
        self.started = self.last = clock.monotonic_s()

    def add(self, topic: str, rows, parts, pc) -> None:
        """Count ``rows`` (an Arrow table) that went to the partitions ``parts``."""
        import numpy as np

        size = np.zeros(rows.num_rows, dtype=np.int64)
        for name in ("key", "value"):
            if name in rows.schema.names:
                size += np.asarray(pc.fill_null(pc.binary_length(rows.column(name)), 0)
                                   .to_numpy(zero_copy_only=False), dtype=np.int64)
        where = np.asarray(parts, dtype=np.int64)
        counts, sizes = np.bincount(where), np.bincount(where, weights=size)
        for p in np.flatnonzero(counts):
            key = (topic, int(p))
            self.records[key] = self.records.get(key, 0) + int(counts[p])
            self.bytes[key] = self.bytes.get(key, 0) + int(sizes[p])
        if self.clock.monotonic_s() - self.last >= PROGRESS_INTERVAL_S:
            self.print()

    def sizes(self) -> tuple[tuple[str, int, int, int], ...]:
        return tuple((t, p, n, self.bytes[(t, p)]) for (t, p), n in sorted(self.records.items()))

    def print(self, extra: str = "") -> None:
        self.last = self.clock.monotonic_s()
        print_progress(self.label, self.last - self.started, self.sizes(), extra=extra,
                       out=self.out)


def print_progress(label: str, seconds: float, sizes, *, tasks: tuple[int, int] | None = None,
                   extra: str = "", out=None) -> None:
    """The load's progress line (:func:`pipelines.progress_line.progress_line`) of
    ``(topic, partition, records, bytes)`` rows; never fails the write."""
    records = {f"{t}-{p}": n for t, p, n, _ in sizes}
    by_bytes = {f"{t}-{p}": b for t, p, _, b in sizes}
    try:
        print(progress_line(label, seconds, records, tasks=tasks, sizes=by_bytes, extra=extra),
              file=out or sys.stderr, flush=True)
    except Exception:   # progress must never fail a write (a closed stream, say)
        pass


# --------------------------------------------------------------------------- tasks

def write_task(storage: Storage, batches: Iterable[Any], *, prefix: int, task_attempt_id: int,
               topic: str | None, job: str, out=None, clock: Clock = SYSTEM) -> TaskResult:
    """Append the rows of Arrow ``batches`` (columns as :meth:`Broker.send_arrow` takes them,
    plus an optional ``topic`` column) as one open transaction of this attempt's producer id.

    ``topic`` (the option) wins over the column, as in Spark's Kafka sink. Before the first
    write to a topic the attempt notes the topic (``_sink/<job>/attempts/<pid>.json``), so
    the driver can find and abort the attempt's transaction even if the attempt fails.
    The task prints the load's progress line (records and bytes per partition) every
    :data:`PROGRESS_INTERVAL_S` and when it ends, to ``out`` (default: stderr)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pid = producer_id(prefix, task_attempt_id)
    broker = Broker(storage, producer_id=pid, producer_epoch=TASK_EPOCH, housekeeping=False)
    broker.begin_transaction()
    touched: set[tuple[str, int]] = set()
    noted: list[str] = []
    records = 0
    tally = _Tally(f"write {job} task {task_attempt_id}", out, clock)
    for batch in batches:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if table.num_rows == 0:
            continue
        for name, rows in _by_topic(table, topic, pc):
            if name not in noted:
                broker.topic(name)  # unknown topic: fail before noting it
                noted.append(name)
                storage.put(attempt_note_path(job, pid), json.dumps(
                    {"producer_id": pid, "topics": noted}).encode())
            parts = broker.send_arrow(name, rows)
            touched.update((name, int(p)) for p in set(parts.tolist()))
            records += rows.num_rows
            tally.add(name, rows, parts, pc)
            _stop_if_closed(storage, broker, job)
    broker.flush()
    _stop_if_closed(storage, broker, job)
    tally.print(", done")
    return TaskResult(pid, tuple(sorted(touched)), records, tally.sizes())


def closed_path(job: str) -> str:
    """The object a batch job's driver creates before it looks for the job's transactions to
    abort: from then on no attempt of the job may leave one open."""
    return f"{SINK_DIR}/closed/{job}"


def _close(storage: Storage, job: str) -> None:
    storage.put(closed_path(job), b"")


def _stop_if_closed(storage: Storage, broker: Broker, job: str) -> None:
    """After an append: if the driver already closed the job (it committed or aborted without
    this attempt, which Spark cancelled or outran), abort this attempt's transaction and stop.
    The driver closes before it scans for transactions, so an append it could not see is
    always followed by this check seeing the close."""
    if not storage.exists(closed_path(job)):
        return
    try:
        broker.abort_transaction()
    except KafkaStoreError:
        pass   # the driver's ABORT (a newer epoch) got there first: ended either way
    raise TopicSinkError(f"job {job} ended without this attempt; its records were aborted")


def _by_topic(table, topic: str | None, pc) -> Iterator[tuple[str, Any]]:
    """``(topic, rows without the topic column)`` groups of ``table``."""
    names = table.schema.names
    if topic is not None or "topic" not in names:
        if topic is None:
            raise ConfigError("a write into topics needs the topic option or a topic column")
        yield topic, table.drop_columns(["topic"]) if "topic" in names else table
        return
    col = table.column("topic")
    if col.null_count:
        raise ConfigError("the topic column is null in some rows and no topic option is set")
    rest = table.drop_columns(["topic"])
    for name in pc.unique(col).to_pylist():
        yield name, rest.filter(pc.equal(col, name))


# --------------------------------------------------------------------------- paths

def job_record_path(job: str) -> str:
    """The decision record of a batch job."""
    return f"{SINK_DIR}/jobs/{job}.json"


def stream_record_path(sink_id: str, batch_id: int) -> str:
    """The decision record of one micro-batch of a stream sink."""
    return f"{_batches_dir(sink_id)}{batch_id:020d}.json"


def _batches_dir(sink_id: str) -> str:
    return f"{SINK_DIR}/streams/{sink_id}/batches/"


def stream_prefix(sink_id: str, batch_id: int) -> int:
    """The producer-id prefix of one micro-batch of a stream sink: the same in every run, so
    the commit of a replayed batch finds (and aborts) what a dead run's attempts of that
    batch left open."""
    digest = hashlib.sha256(f"{sink_id}/{batch_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % ((1 << _PREFIX_BITS) - 1) + 1


def stream_job(sink_id: str, batch_id: int) -> str:
    """The job name (attempt notes) of one micro-batch of a stream sink."""
    return f"{sink_id}-{batch_id}"


def attempt_note_path(job: str, pid: int) -> str:
    """The note listing the topics one attempt writes to."""
    return f"{SINK_DIR}/attempts/{job}/{pid}.json"


# --------------------------------------------------------------------------- driver

def commit_job(storage: Storage, results: Sequence[TaskResult | None], *, job: str, prefix: int,
               topics: Iterable[str] = (), sink_id: str | None = None,
               batch_id: int | None = None, started_ms: int | None = None, out=None,
               clock: Clock = SYSTEM) -> dict:
    """Make the chosen attempts' transactions readable, all or none; the decision record.

    ``results``: one per Spark partition (the attempts Spark chose). ``topics``: topics
    the job may have written besides those in ``results`` (the topic option). With
    ``sink_id`` and ``batch_id`` (a stream), a batch already committed by an earlier run is
    not committed again: this run's transactions are aborted and the earlier record is
    rolled forward and returned. Prints the load's progress line for the job (records and
    bytes per partition, tasks, markers written, attempts aborted) to ``out`` (default:
    stderr); ``started_ms``: when the job started (wall clock), else the commit's start."""
    started_ms = clock.wall_ms() if started_ms is None else started_ms
    chosen = [r for r in results if r is not None]
    winners = {r.producer_id for r in chosen}
    all_topics = set(topics) | {t for r in chosen for t, _ in r.partitions}
    all_topics |= _noted_topics(storage, job)
    if sink_id is not None:
        path = stream_record_path(sink_id, batch_id)
        earlier = _read_record(storage, path)
        if earlier is not None:
            # A replay of a committed batch: finish the earlier commit first (its markers),
            # then abort what the replay wrote (the same prefix: the batch id's).
            complete(storage, earlier)
            abort_job(storage, job=job, prefix=prefix, topics=all_topics)
            return earlier
    else:
        path = job_record_path(job)
        _close(storage, job)   # a losing attempt still appending aborts itself from now on
    aborted = _abort_open(storage, all_topics, prefix, keep=winners)
    txns = [{"topic": t, "partition": p, "producer_id": r.producer_id,
             "producer_epoch": TASK_EPOCH} for r in chosen for t, p in r.partitions]
    _check_still_open(storage, txns, job)
    record = {"format": RECORD_FORMAT, "job": job, "commit_id": uuid.uuid4().hex,
              "sink": sink_id, "batch_id": batch_id,
              "records": sum(r.records for r in chosen), "transactions": txns}
    stored = _put_record(storage, path, record)
    markers = complete(storage, stored)
    if stored["commit_id"] != record["commit_id"]:  # another run committed the batch meanwhile
        abort_job(storage, job=job, prefix=prefix, topics=all_topics)
    _forget(storage, path, stored, sink_id, batch_id)
    _drop_notes(storage, job)
    print_progress(f"write {job} committed", (clock.wall_ms() - started_ms) / 1000,
                   _job_sizes(chosen), tasks=(len(chosen), len(results)),
                   extra=f", markers {markers}, attempts aborted {aborted}", out=out)
    return stored


def _job_sizes(chosen: Sequence[TaskResult]) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, records, bytes)`` of the chosen attempts, summed per partition."""
    total: dict[tuple[str, int], list[int]] = {}
    for r in chosen:
        for t, p, n, b in r.sizes:
            acc = total.setdefault((t, p), [0, 0])
            acc[0] += n
            acc[1] += b
    return [(t, p, n, b) for (t, p), (n, b) in sorted(total.items())]


def abort_job(storage: Storage, *, job: str, prefix: int, topics: Iterable[str] = (),
              close: bool = False) -> int:
    """Abort every open transaction of the job's prefix on ``topics`` and on the topics its
    attempts noted (ABORT markers at epoch 1: an attempt still running is fenced); the
    number aborted. Nothing of the job stays readable or holds the last stable offset.
    ``close`` (a batch job, whose name is never used again): first close the job, so an
    attempt Spark cancelled but that is still appending aborts its own transaction."""
    if close:
        _close(storage, job)
    aborted = _abort_open(storage, set(topics) | _noted_topics(storage, job), prefix, keep=())
    _drop_notes(storage, job)
    return aborted


def recover_jobs(storage: Storage) -> int:
    """Roll forward every batch job whose decision was stored but whose markers a crash
    left unwritten, then drop its record; the number of markers written."""
    written = 0
    for info in storage.list(f"{SINK_DIR}/jobs/"):
        record = _read_record(storage, info.path)
        if record is None:
            continue
        written += complete(storage, record)
        storage.delete([info.path])
    return written


def recover_stream(storage: Storage, sink_id: str) -> dict | None:
    """Roll forward a stream sink's newest decision record (a crash between its decision
    and its markers); that record, or None for a new sink."""
    infos = storage.list(_batches_dir(sink_id))
    if not infos:
        return None
    record = _read_record(storage, infos[-1].path)
    if record is not None:
        complete(storage, record)
    return record


def last_committed_batch(storage: Storage, sink_id: str) -> int | None:
    """The newest micro-batch id a stream sink committed, or None."""
    infos = storage.list(_batches_dir(sink_id))
    return int(infos[-1].path.rsplit("/", 1)[-1].split(".")[0]) if infos else None


# --------------------------------------------------------------------------- helpers

def _abort_open(storage: Storage, topics: Iterable[str], prefix: int, keep) -> int:
    aborted = 0
    for topic in sorted(topics):
        try:
            partitions = load_topic(storage, topic).partitions
        except UnknownTopicError:
            continue  # a topic that does not exist holds nothing of the job
        for p in range(partitions):
            for txn in open_transactions(storage, topic, p):
                if prefix_of(txn.producer_id) != prefix or txn.producer_id in keep:
                    continue
                Broker(storage, producer_id=txn.producer_id,
                       producer_epoch=max(txn.producer_epoch + 1, ABORT_EPOCH),
                       housekeeping=False).write_marker(topic, p, commit=False)
                aborted += 1
    return aborted


def _check_still_open(storage: Storage, txns: Sequence[Mapping[str, Any]], job: str) -> None:
    """Every chosen transaction must still be open at its epoch: one aborted meanwhile (a
    hanging-transaction abort of a job that ran too long) would commit as nothing."""
    by_partition: dict[tuple[str, int], set[int]] = {}
    for t in txns:
        by_partition.setdefault((t["topic"], t["partition"]), set()).add(t["producer_id"])
    for (topic, partition), pids in by_partition.items():
        open_now = {o.producer_id for o in open_transactions(storage, topic, partition)
                    if o.producer_epoch == TASK_EPOCH}
        lost = pids - open_now
        if lost:
            raise TopicSinkError(
                f"write job {job}: the transaction of producer {min(lost)} on {topic}/{partition} "
                f"was ended before the job committed (aborted as hanging? a job must commit "
                f"within twice transaction.max.timeout.ms of its writes); nothing was committed")


def _put_record(storage: Storage, path: str, record: dict) -> dict:
    """Store the decision record with put-if-absent; the record stored at ``path`` (ours,
    or the one that was there first). An unknown outcome is read back."""
    data = json.dumps(record, sort_keys=True).encode()
    try:
        storage.put_if_absent(path, data)
        return record
    except CommitConflict:
        pass
    except StorageError:
        pass  # unknown outcome: what is stored decides
    stored = _read_record(storage, path)
    if stored is None:
        raise TopicSinkError(f"could not store the decision record {path}; nothing was committed")
    return stored


def _read_record(storage: Storage, path: str) -> dict | None:
    if not storage.exists(path):
        return None
    return json.loads(storage.get(path))


def _noted_topics(storage: Storage, job: str) -> set[str]:
    topics: set[str] = set()
    for info in storage.list(f"{SINK_DIR}/attempts/{job}/"):
        try:
            topics.update(json.loads(storage.get(info.path))["topics"])
        except (ValueError, KeyError, StorageError):
            continue  # a note half-written by a dying attempt: its topic is also elsewhere
    return topics


def _drop_notes(storage: Storage, job: str) -> None:
    notes = [i.path for i in storage.list(f"{SINK_DIR}/attempts/{job}/")]
    if notes:
        storage.delete(notes)


def _forget(storage: Storage, path: str, record: Mapping[str, Any], sink_id: str | None,
            batch_id: int | None) -> None:
    """A batch job's record is not needed once its markers are written; a stream keeps
    its newest records (a restart compares its replay with them)."""
    if sink_id is None:
        storage.delete([path])
        return
    infos = storage.list(_batches_dir(sink_id))
    old = [i.path for i in infos[:-KEEP_STREAM_RECORDS]]
    if old:
        storage.delete(old)
