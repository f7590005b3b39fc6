"""Offsets of open transactions (TxnOffsetCommit), as the group coordinator sees them.

A transaction's offsets wait in ``_txn_offsets/<producer id>/<group hex>.json`` until its
coordinator ends it: applied to the group on commit, dropped on abort, the document deleted
either way (:func:`add_pending_offsets` and :func:`take_pending_offsets`, which
:mod:`.txn_service` calls). Meanwhile a consumer that asks
for *stable* offsets (OffsetFetch ``require_stable``, KIP-447: read_committed consumers)
must not get the offsets from before that transaction: a consumer that rewinds after a
transaction whose outcome it never learnt would process the same input again while that
transaction may still commit. Such partitions are answered UNSTABLE_OFFSET_COMMIT and the
consumer asks again.
"""
from __future__ import annotations

import json

from ...errors import ObjectNotFoundError, StorageError
from ...storage import Storage

#: Where open transactions' offsets wait, one document per producer id and group.
PENDING_DIR = "_txn_offsets"


def unstable_partitions(storage: Storage, group: str, now_ms: int, open_for_ms: int
                        ) -> set[tuple[str, int]]:
    """Partitions of ``group`` with offsets of a transaction not ended yet: a pending
    document of the group whose transaction began less than ``open_for_ms`` ago (the longest
    a transaction stays open before its coordinator or the hanging-transaction check ends
    it; a document older than that was left by a coordinator that lost its state, and must
    not hold the group's offsets unstable for ever). One listing of the open transactions'
    documents and a read of this group's."""
    suffix = f"/{group.encode('utf-8').hex()}.json"
    out: set[tuple[str, int]] = set()
    for info in storage.list(f"{PENDING_DIR}/"):
        if not info.path.endswith(suffix):
            continue
        try:
            doc = json.loads(storage.get(info.path[info.path.index(PENDING_DIR):]))
        except (ObjectNotFoundError, ValueError):
            continue   # ended meanwhile, or not a document of ours
        started = doc.get("txn_start_ms", -1)
        if started < 0 or now_ms - started < open_for_ms:
            out.update((t, p) for t, p, *_ in doc.get("offsets", ()))
    return out


# -- the transaction coordinator's side ---------------------------------------------------------
def _pending_path(pid: int, group: str) -> str:
    return f"{PENDING_DIR}/{pid:020d}/{group.encode('utf-8').hex()}.json"


def add_pending_offsets(storage: Storage, pid: int, epoch: int, group: str, offsets: dict,
                        txn_start_ms: int = -1, transactional_id: str | None = None) -> None:
    """Remember offsets of an open transaction (``{(topic, partition): (offset, leader epoch,
    metadata)}``) until it ends. One producer sends its requests in order, so read-merge-write
    of its own object races with nobody. The document names its transaction (epoch and start
    time): offsets of an earlier transaction of the same epoch are never merged in."""
    path = _pending_path(pid, group)
    fresh = {"epoch": epoch, "txn_start_ms": txn_start_ms, "offsets": []}
    try:
        doc = json.loads(storage.get(path))
        if doc.get("epoch") != epoch or doc.get("txn_start_ms", -1) != txn_start_ms:
            doc = fresh
    except StorageError:
        doc = fresh
    have = {(t, p): (o, e, md) for t, p, o, e, md in doc["offsets"]}
    have.update(offsets)
    doc["offsets"] = [[t, p, o, e, md] for (t, p), (o, e, md) in sorted(have.items())]
    doc["group"] = group
    doc["transactional_id"] = transactional_id   # whose state says whether it is still open
    storage.put(path, json.dumps(doc).encode())


def take_pending_offsets(storage: Storage, pid: int, epoch: int, txn_start_ms: int = -1
                         ) -> list[tuple[str, str, dict]]:
    """``(path, group, offsets)`` to settle when producer ``pid``'s transaction at ``epoch``,
    begun at ``txn_start_ms``, ends: its own documents with their offsets, and documents of
    older epochs (fenced) with none. A document of another transaction of this epoch, or of a
    newer epoch, is not returned: a completion that runs again late (a retried EndTxn, the
    timeout check of another broker) must neither apply the next transaction's offsets nor
    drop them. A document of this epoch begun earlier is of a transaction that ended before
    this one began (one at a time per producer): settled with none, or it would hold its
    group's offsets unstable. Documents written before they named their transaction match
    on epoch."""
    out = []
    for info in storage.list(f"{PENDING_DIR}/{pid:020d}/"):
        rel = info.path[info.path.index(PENDING_DIR):] if PENDING_DIR in info.path else info.path
        try:
            doc = json.loads(storage.get(rel))
        except (StorageError, ValueError):
            continue
        doc_epoch = doc.get("epoch", -1)
        if doc_epoch == epoch and doc.get("txn_start_ms", txn_start_ms) == txn_start_ms:
            offsets = {(t, p): (o, e, md) for t, p, o, e, md in doc.get("offsets", ())}
        elif doc_epoch < epoch or (doc_epoch == epoch and 0 <= doc.get("txn_start_ms", -1) < txn_start_ms):
            offsets = {}
        else:
            continue
        out.append((rel, doc.get("group", ""), offsets))
    return out


__all__ = ["PENDING_DIR", "StorageError", "add_pending_offsets", "take_pending_offsets",
           "unstable_partitions"]
