"""Moved to kafkastore.format.segment_scan, kafkastore.format.segment_stats,
kafkastore.format.segment_build and kafkastore.format.segment_indexes; this old import path
stays for one release and holds no code.

Log segments: building, scanning, recovering and indexing ``.log`` bytes. A segment is a
run of v2 record batches (the ``.log``) plus two sparse indexes (``.index``,
``.timeindex``, see :mod:`kafkastore.format.offset_index` and
:mod:`kafkastore.format.time_index`). Everything is a pure function over bytes, in four
modules, read bottom up:

* :mod:`.segment_scan`: walking the batches (:func:`iter_batches`), the valid prefix
  (:func:`scan_log`) and recovery of a torn tail versus damage (:func:`recover`);
* :mod:`.segment_stats`: what a manifest records about a segment (:class:`SegmentStats`,
  :func:`segment_stats`);
* :mod:`.segment_build`: building a segment and its indexes (:class:`SegmentBuilder`,
  :func:`index_batches`, :func:`index_batch_arrays`, :func:`rebuild_indexes`), with the
  rule of when Kafka writes an index entry;
* :mod:`.segment_indexes`: checking and loading the indexes (:func:`check_indexes`,
  :func:`load_indexes`).

Their public names (and the errors this module always re-exported) are re-exported here.
"""
from __future__ import annotations

from ..errors import (CorruptIndexError, CorruptRecordError, CrcMismatchError,  # noqa: F401
                      OffsetOrderError, SegmentOffsetOverflowError, TruncatedBatchError,
                      UnsupportedFormatError)
from .segment_build import (DEFAULT_INDEX_INTERVAL_BYTES, BuiltSegment,  # noqa: F401
                            IndexedBatches, SegmentBuilder, index_batch_arrays, index_batches,
                            rebuild_indexes)
from .segment_indexes import check_indexes, load_indexes  # noqa: F401
from .segment_scan import LogScan, RecoveryResult, iter_batches, recover, scan_log  # noqa: F401
from .segment_stats import SegmentStats, batch_min_timestamp, segment_stats  # noqa: F401

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES", "BuiltSegment", "IndexedBatches", "SegmentBuilder",
    "index_batch_arrays", "index_batches", "rebuild_indexes",
    "check_indexes", "load_indexes",
    "LogScan", "RecoveryResult", "iter_batches", "recover", "scan_log",
    "SegmentStats", "batch_min_timestamp", "segment_stats",
    "CorruptIndexError", "CorruptRecordError", "CrcMismatchError", "OffsetOrderError",
    "SegmentOffsetOverflowError", "TruncatedBatchError", "UnsupportedFormatError",
]
