"""The S3 clients of a storage: bounded ones for commit points, twins for housekeeping.

* Conditional creates (commit points) go through an s3fs client whose retries and
  timeouts are bounded (:data:`COMMIT_PUT_S3_CONFIG`, :func:`bounded_s3`), so one attempt
  of a commit takes at most :data:`MAX_COMMIT_PUT_S` and the commit engine, not the
  client, owns retries and reads back what it cannot tell (docs/DESIGN.md section 9).
* Background housekeeping (merging, gc) gets clients, connection pools and an event-loop
  thread of its own (:func:`open_s3` on :func:`housekeeping_loop`), so its requests never
  queue in front of a produce commit's (:meth:`kafkastore.storage.Storage.for_housekeeping`).
"""
from __future__ import annotations

import os
import threading
from typing import Any

import fsspec

from ..errors import ConfigError


#: botocore settings of the S3 client that sends conditional creates: two attempts (one retry
#: for a 5xx or a reset connection; a retry of a create that landed answers 412, which the
#: commit engine reads back), each bounded by the connect and read timeouts.
COMMIT_PUT_S3_CONFIG = {"connect_timeout": 3, "read_timeout": 5,
                        "retries": {"max_attempts": 2, "mode": "standard"}}
#: The longest one conditional create on S3 can take with those settings (two attempts of
#: connect + read timeout, and botocore's back-off between them, under a second).
MAX_COMMIT_PUT_S = 2 * (3 + 5) + 1


def bounded_s3(storage_options: dict[str, Any], *, loop=None):
    """An s3fs filesystem like the storage's, with bounded retries and timeouts for commits
    (on event loop ``loop``, a fresh instance; default: fsspec's shared loop and instance)."""
    options = dict(storage_options)
    options.setdefault("use_listings_cache", False)
    config = dict(options.get("config_kwargs") or {})
    for key, value in COMMIT_PUT_S3_CONFIG.items():
        config[key] = value
    options["config_kwargs"] = config
    fs = open_s3("", options, loop=loop)
    fs.retries = 1   # s3fs's own retry loop around botocore's: one pass only
    return fs


def open_s3(url: str, options: dict[str, Any], *, loop=None):  # url: for the error only
    """An s3fs filesystem; with ``loop``, a fresh instance (its own clients and connection
    pool) whose requests run on that event loop."""
    if loop is not None:
        options = {**options, "loop": loop, "skip_instance_cache": True}
    try:
        return fsspec.filesystem("s3", **options)
    except (ImportError, TypeError, ValueError) as exc:
        where = f" {url!r}" if url else ""
        raise ConfigError(f"cannot open storage{where}: {exc}") from None


_HK_LOOP: list = [None, None]   # [pid, event loop] of housekeeping's S3 requests
_HK_LOOP_LOCK = threading.Lock()


def housekeeping_loop():
    """This process's event loop for housekeeping's S3 requests, on a daemon thread of its
    own (``kafkastore-housekeeping-io``): fsspec runs every request of its filesystems on
    one shared loop thread, where a merge's megabytes and gc's deletes would queue in front
    of a produce commit's put."""
    import asyncio

    with _HK_LOOP_LOCK:
        if _HK_LOOP[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="kafkastore-housekeeping-io",
                             daemon=True).start()
            _HK_LOOP[:] = [os.getpid(), loop]
        return _HK_LOOP[1]
