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
* ``_sink/settled``: a random token the writer puts after its last marker and before it
  deletes its pending object: "some job finished marking".
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
twice, whatever the number of past jobs. Rolling forward writes markers, so a reader of a
root with a pending job needs write access; a reader without it gets the storage error.
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Callable, Mapping, TypeVar

from .write.log_writer import LogWriter as Broker
from .errors import ObjectNotFoundError
from .storage import Storage
from .write.transactions import open_transactions

#: Decision records whose COMMIT markers may not all be written yet.
PENDING_DIR = "_sink/pending/"
#: The token the writer of a many-partition job changes after its last marker.
SETTLED_PATH = "_sink/settled"
#: Snapshots a reader takes at most while jobs keep finishing under it.
MAX_SNAPSHOTS = 20

T = TypeVar("T")


def pending_path(record: Mapping[str, Any]) -> str:
    """The pending object of a decision record (by its commit id)."""
    # Records of older writers carry no commit id; their job name is unique as well.
    return f"{PENDING_DIR}{record.get('commit_id') or record['job']}.json"


def mark_pending(storage: Storage, record: Mapping[str, Any]) -> None:
    """Before a decided job's first marker: readers from now on roll it forward."""
    storage.put(pending_path(record), json.dumps(record, sort_keys=True).encode())


def finish_pending(storage: Storage, record: Mapping[str, Any]) -> None:
    """After a job's last marker: change the settled token, then drop its pending object
    (in that order: a reader that misses the object sees the new token)."""
    storage.put(SETTLED_PATH, uuid.uuid4().hex.encode())
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


def missing_markers(storage: Storage, record: Mapping[str, Any]) -> bool:
    """Whether some transaction of a decision record is still open (a marker missing)."""
    wanted: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for t in record["transactions"]:
        wanted.setdefault((t["topic"], int(t["partition"])), set()).add(
            (t["producer_id"], t["producer_epoch"]))
    return any(wanted[tp] & {(o.producer_id, o.producer_epoch)
                             for o in open_transactions(storage, *tp)}
               for tp in sorted(wanted))


def complete(storage: Storage, record: Mapping[str, Any]) -> int:
    """Write a decided job's missing COMMIT markers the way readers can rely on: pending
    object, markers, settled token, pending object dropped; the markers written. A record
    whose markers are all written costs only the check."""
    if not missing_markers(storage, record):
        return 0
    mark_pending(storage, record)
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
    the last one is returned after a final roll-forward of what is pending."""
    for _ in range(MAX_SNAPSHOTS):
        settle_pending(storage)
        before = _token(storage)
        result = take()
        if not storage.list(PENDING_DIR) and _token(storage) == before:
            return result
    settle_pending(storage)
    return take()
