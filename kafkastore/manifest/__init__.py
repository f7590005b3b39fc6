"""The offset manifest: the commit point of one topic-partition (DESIGN.md section 3).

A partition's state is a sequence of immutable, numbered manifest versions at
``topics/<t>/<p>/_manifest/<20-digit version>.json``. Version 1 is the first
commit; version N+1 is created with put-if-absent, so of two writers racing
from version N exactly one wins and the other gets :class:`CommitConflict` (and retries
on :class:`kafkastore.commit.CommitEngine`).

A version's state is a full snapshot (live segments, log start offset, leader
epoch, producer state, compaction state), but it is *stored* (format 2) either
full or as a delta on the version before (Delta Lake's ``_delta_log`` shape,
where the checkpoint is itself a commit): every :attr:`ManifestStore.full_every`-th
version is full, the others hold only what changed
(:mod:`kafkastore.manifest.delta`), so a commit writes bytes in proportion to
its change, not to the number of live segments. The head is found without
listing: from the last head this process saw, or from the hint
``_manifest/_last_checkpoint.json`` (the newest full version), then by reading
the next versions until one is absent (:meth:`ManifestStore.latest`). Format-1
roots (every version full) are read as they are; their next commit is full.
Old versions are only needed by readers that loaded them before they were
superseded; :meth:`ManifestStore.expire_versions` removes them, a whole group
(a full version and its deltas) at a time, after a grace period.

Commits are data, in the style of Iceberg's table updates: a list of updates
(:class:`AppendSegments`, :class:`ReplaceSegments`, :class:`AdvanceLogStart`,
:class:`SetLeaderEpoch`, :class:`UpdateProducerState`, :class:`SetCleanerOffset`,
:class:`SetExtra`) plus requirements on the base (:class:`AssertVersion`,
:class:`AssertLeaderEpoch`, :class:`AssertSegmentsPresent`,
:class:`AssertHighWatermark`, :class:`AssertLogStartOffset`), applied by the
one pure function :func:`apply`, which also checks every invariant.

Segment checksums are CRC-32C (Castagnoli, the record-batch CRC) of the whole
``.log`` object, stored as an unsigned 32-bit integer.

The package, bottom up: :mod:`.model` (the value types, their JSON declared once per type
in ``FIELDS``, the invariants), :mod:`.updates` (updates, requirements and :func:`apply`),
:mod:`.delta` (delta versions), :mod:`.history` (expiry and the files stored versions list)
and :mod:`.store` (:class:`ManifestStore`). Every name importers used from the single
module this package replaced is re-exported here, so ``from kafkastore.manifest import X``
keeps working.
"""
from __future__ import annotations

from ..errors import (ConfigError, CorruptMetadataError, FencedError, InvalidUpdateError,
                      ManifestGapError, ObjectNotFoundError, OffsetOutOfRangeError,
                      RequirementFailedError, StaleUploadError, StorageError, TopicDeletedError)
from . import delta
from .heads import _Head, _HeadCache  # noqa: F401 (tests import them from here)
from .model import (MANIFEST_FORMAT, MAX_PRODUCER_BATCHES, NO_TIMESTAMP, READABLE_FORMATS,
                    BatchMetadata, CommitInfo, Manifest, ProducerState, SegmentEntry,
                    check_invariants)
from .store import ManifestStore
from .updates import (AdvanceLogStart, AppendSegments, AssertHighWatermark, AssertLeaderEpoch,
                      AssertLogStartOffset, AssertSegmentsPresent, AssertVersion,
                      Build, ReplaceSegments, Requirement, SetCleanerOffset, SetExtra,
                      SetLeaderEpoch, Update, UpdateProducerState, apply)

__all__ = [
    # the model
    "MANIFEST_FORMAT", "MAX_PRODUCER_BATCHES", "NO_TIMESTAMP", "READABLE_FORMATS",
    "BatchMetadata", "CommitInfo", "Manifest", "ProducerState", "SegmentEntry",
    "check_invariants",
    # updates, requirements, apply
    "Update", "AppendSegments", "ReplaceSegments", "AdvanceLogStart", "SetLeaderEpoch",
    "UpdateProducerState", "SetCleanerOffset", "SetExtra",
    "Requirement", "AssertVersion", "AssertLeaderEpoch", "AssertSegmentsPresent",
    "AssertHighWatermark", "AssertLogStartOffset", "apply",
    # the store
    "Build", "ManifestStore",
    # delta versions
    "delta",
    # the errors the module raised, under the names it re-exported
    "ConfigError", "CorruptMetadataError", "FencedError", "InvalidUpdateError",
    "ManifestGapError", "ObjectNotFoundError", "OffsetOutOfRangeError",
    "RequirementFailedError", "StaleUploadError", "StorageError", "TopicDeletedError",
]
