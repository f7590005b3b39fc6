"""Offsets of open transactions (TxnOffsetCommit), as the group coordinator sees them.

A transaction's offsets wait in ``_txn_offsets/<producer id>/<group hex>.json`` until its
coordinator ends it: applied to the group on commit, dropped on abort, the document deleted
either way (the coordinator's side is in :mod:`.txn_service`). Meanwhile a consumer that asks
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


__all__ = ["PENDING_DIR", "StorageError", "unstable_partitions"]
