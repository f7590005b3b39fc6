"""Object storage through fsspec, the foundation every part of the log writes through.

* :mod:`~kafkastore.storage.store`: :class:`Storage` (a root URL on an fsspec filesystem:
  get, list, put, put_many, put_if_absent, delete, upload times) and its error contract.
* :mod:`~kafkastore.storage.object_writes`: whole-object writes, atomic and durable, per
  kind of store (local files: temporary file, fsync, link or rename, directory fsyncs;
  memory; S3's conditional PUT), the fsync pool and housekeeping's paced local deletes.
* :mod:`~kafkastore.storage.s3`: the S3 clients, bounded for commit points, twins for
  housekeeping.

``from kafkastore.storage import Storage`` stays the way to reach it.
"""
from __future__ import annotations

from .object_writes import DELETES_PER_SYNC, write_object
from .s3 import COMMIT_PUT_S3_CONFIG, MAX_COMMIT_PUT_S
# _mtime: an object's time from an fsspec listing entry (gc, topics and vacuum import it).
from .store import ObjectInfo, Storage, _mtime  # noqa: F401

__all__ = ["COMMIT_PUT_S3_CONFIG", "DELETES_PER_SYNC", "MAX_COMMIT_PUT_S", "ObjectInfo",
           "Storage", "write_object"]
