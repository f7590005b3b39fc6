"""Uploading one segment's objects (``.index``, ``.timeindex``, ``.log``), shared by every
writer that builds segments whole: the Broker's flushes and merging.

An empty index is not uploaded: the manifest entry records its size as 0, which every
reader takes as "absent" (they scan the segment instead), so an empty object would only
cost a PUT. The indexes go first and the log last in one :meth:`Storage.put_many` (on
local files one directory fsync for the three, docs/DECISIONS.md); a half-uploaded set is
an unlisted orphan either way until the manifest commit, and gc removes it after its grace.
"""
from __future__ import annotations

from typing import Any

from . import layout
from .storage import Storage


def put_segment_objects(storage: Storage, topic: str, partition: int, base_offset: int,
                        segment_id: str, log: Any, index: bytes, timeindex: bytes) -> None:
    """Upload a segment: its non-empty indexes, then ``log`` (bytes, or a list of buffers
    written one after another, as :meth:`Storage.put_many` takes them)."""
    storage.put_many((layout.segment_path(topic, partition, base_offset, segment_id, ext), data)
                     for ext, data in ((".index", index), (".timeindex", timeindex), (".log", log))
                     if ext == ".log" or len(data))
