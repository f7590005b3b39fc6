"""The quality gate's publish step: moving the table's ``validated`` tag over main's
history, oldest first, past passed snapshots and failures a later reprocess replaced, by a
compare-and-set on the tag run on the commit engine (:func:`publish`).
"""
from __future__ import annotations

from typing import Any

from kafkastore.commit import Budget, Clock, CommitEngine, CommitTarget, Done
from kafkastore.errors import WarehouseError

from ..warehouse.catalog import name_of
from ..warehouse.properties import OPERATION_KEY, VALIDATED_TAG
from ..warehouse.snapshots import main_ancestry, summary_of
from .rows import is_kafkastore, snapshot_ranges

PUBLISH_ATTEMPTS = 10


# ---------------------------------------------------------------------------
# the gate: moving the validated tag


def _supersedes(reprocess: list[Range], failed: list[Range]) -> bool:
    """Does a reprocess with ``reprocess`` ranges delete every row a failed
    snapshot with ``failed`` ranges brought (``offset >= from`` per partition)?"""
    starts = {(r.topic, r.partition): r.start for r in reprocess}
    return all((f.topic, f.partition) in starts and starts[(f.topic, f.partition)] <= f.start
               for f in failed if f.until > f.start)


def _pending_after(chain, verdict) -> tuple[Any, int | None]:
    """Walk ``chain`` (snapshots after the tag, oldest first) and return (the
    newest snapshot the tag may point at, the failed snapshot holding back the
    rest). ``verdict(snapshot)`` is True/False for kafkastore snapshots."""
    pending: list[tuple[int, list[Range]]] = []
    candidate = None
    for snap in chain:
        summary = summary_of(snap)
        if is_kafkastore(summary):
            ranges = snapshot_ranges(summary)
            if summary.get(OPERATION_KEY) == "reprocess":
                pending = [(sid, r) for sid, r in pending if not _supersedes(ranges, r)]
            if not verdict(snap):
                pending.append((snap.snapshot_id, ranges))
        if not pending:
            candidate = snap
    return candidate, (pending[0][0] if pending else None)


def _chain(table, target, tag_snapshot):
    """Snapshots of main's history after the tag up to ``target``, oldest first;
    None when the tag is already at or past ``target``.

    A snapshot expired in between (its rows are still in the table but can no
    longer be read on their own) is a WarehouseError: the tag is not moved over
    unvalidated rows. ``kafkastore vacuum`` never expires these snapshots
    (``pipelines.jobs.vacuum.awaiting_validation``) unless told to. pyiceberg's expiry cuts the child's parent link, so a cut
    shows as a walk that ends at a root which is not the table's first snapshot
    (sequence number above 1) or at a parent id that no longer exists.
    """
    tag_line = set()
    if tag_snapshot is not None:
        tag_line = {s.snapshot_id for s in main_ancestry(table, tag_snapshot)}
        if target.snapshot_id in tag_line:
            return None
    out, snap = [], target
    while snap.snapshot_id not in tag_line:
        out.append(snap)
        parent = snap.parent_snapshot_id
        nxt = None if parent is None else table.snapshot_by_id(parent)
        if nxt is None:
            if parent is not None or (snap.sequence_number or 1) > 1:
                raise WarehouseError(
                    f"table {name_of(table)}: snapshots before "
                    f"{snap.snapshot_id}, after the {VALIDATED_TAG} tag, were expired before "
                    f"they were validated; their rows cannot be checked, so the tag stays "
                    f"(kafkastore vacuum keeps such snapshots unless run with "
                    f"--expire-unvalidated; a reprocess does not restore them)")
            break
        snap = nxt
    return list(reversed(out))


def publish(table, dl_table, target, verdict, *, attempts: int = PUBLISH_ATTEMPTS,
            clock: Clock | None = None, rng=None):
    """Move the ``validated`` tag as far towards ``target`` as the verdicts allow
    (see the module docstring); returns (tag snapshot id or None, held_by).

    The move is a commit on kafkastore's one engine (:mod:`kafkastore.commit`): a tag
    moved meanwhile by another validator means walking again from the new tag;
    :class:`kafkastore.errors.CommitGaveUpError` after ``attempts`` such races."""
    engine = CommitEngine(budget=Budget(max_attempts=attempts), clock=clock, rng=rng)
    return engine.run(_TagMove(table, target, verdict))


class _TagMove(CommitTarget):
    """Moving the ``validated`` tag: the catalog's atomic swap of the table's refs. The
    plan walks from the current tag; a lost response is read back from the tag itself."""

    refused_errors = ()
    unknown_errors = (Exception,)   # a failed catalog call may have been applied
    reusable = False                 # a pyiceberg update cannot be committed twice

    def __init__(self, table, target, verdict):
        from pyiceberg.exceptions import CommitFailedException

        self.conflict_errors = (CommitFailedException,)
        self.table, self.target, self.verdict = table, target, verdict

    def read(self):
        self.table = self.table.refresh()
        return self.table

    def plan(self, table, attempt: int):
        tag = table.snapshot_by_name(VALIDATED_TAG)
        chain = _chain(table, self.target, tag)
        if chain is None:
            return Done((tag.snapshot_id, None))
        candidate, held_by = _pending_after(chain, self.verdict)
        if candidate is None:
            return Done(((tag.snapshot_id if tag is not None else None), held_by))
        return (tag.snapshot_id if tag is not None else None), candidate.snapshot_id, held_by

    def put(self, planned) -> None:
        old, candidate, _ = planned
        with self.table.manage_snapshots() as ms:
            if old is not None:
                ms.remove_tag(VALIDATED_TAG)
            ms.create_tag(candidate, VALIDATED_TAG)

    def read_back(self, planned) -> bool | None:
        old, candidate, _ = planned
        now = self.table.refresh().snapshot_by_name(VALIDATED_TAG)
        now_id = now.snapshot_id if now is not None else None
        if now_id == candidate:
            return True
        return None if now_id == old else False

    def result(self, planned, *, attempts: int, read_back: bool):
        return planned[1], planned[2]

    def describe(self, planned) -> str:
        return (f"moving tag {VALIDATED_TAG} of table {name_of(self.table)} "
                f"to snapshot {planned[1]}")
