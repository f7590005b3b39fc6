"""Object storage through fsspec: the handful of operations the log needs (:class:`Storage`).

Paths handed to :class:`Storage` are relative to its root and use ``/``.
The one operation with a contract beyond fsspec's is :meth:`Storage.put_if_absent`,
the commit primitive of manifests and warehouse commits. Whole-object writes go
through :func:`kafkastore.storage.object_writes.write_object` (atomic and durable, the
strategy picked from the filesystem's type); the S3 clients for commit points and for
housekeeping are made by :mod:`kafkastore.storage.s3`.

Error contract: a missing object raises :class:`ObjectNotFoundError`; any other
failure of the store raises :class:`StorageError`; ``put_if_absent`` on an
existing name raises :class:`CommitConflict`.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from ..clock import Clock, as_clock
from ..errors import (BucketNotFoundError, CommitConflict, ConfigError, KafkaStoreError,
                      ObjectNotFoundError, StorageError, StoragePermissionError)
from ..threads import HOUSEKEEPING, current_lane, foreground_io, yield_to_foreground
from .object_writes import MEMORY_LOCK, TEMP_PREFIX, pace_local_delete, write_many_local, write_object
from .s3 import bounded_s3, housekeeping_loop, open_s3

_UNGUARDED = contextlib.nullcontext()
_KNOWN_PROTOCOLS = ("file", "local", "memory", "s3", "s3a", "gs", "gcs", "abfs", "az")
#: ``(protocol, bucket)`` of the buckets seen to exist: checked once per process, on the
#: first "not found" answer (a missing bucket answers every request with "not found").
_BUCKETS_FOUND: set[tuple[str, str]] = set()
# Exceptions from these client libraries are transport failures, never bugs of ours.
_CLIENT_MODULES = frozenset({"botocore", "aiobotocore", "aiohttp", "urllib3", "requests",
                             "s3fs", "gcsfs", "adlfs", "google", "azure"})


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its path relative to the root, size in bytes, and modification time (epoch s)."""

    path: str
    size: int
    mtime: float


def _split_url(url: str) -> tuple[str, str]:
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("storage root must be a URL like file:///data/log, memory://log or s3://bucket/prefix")
    if "://" not in url:
        return "file", os.path.abspath(url)
    protocol, rest = url.split("://", 1)
    protocol = protocol.lower()
    if not protocol:
        raise ConfigError(f"storage URL {url!r} has no scheme: expected file://, memory:// or s3://")
    if protocol not in _KNOWN_PROTOCOLS:
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"unsupported storage URL {url!r}: {exc}") from None
    if protocol in ("file", "local"):
        return "file", os.path.abspath(rest or "/")
    if protocol in ("s3", "s3a"):
        protocol = "s3"
        if not rest.strip("/") or rest.startswith("/"):
            raise ConfigError(f"storage URL {url!r} names no bucket: expected s3://bucket[/prefix]")
    return protocol, rest.rstrip("/")


def _is_store_failure(exc: BaseException) -> bool:
    """True for errors that mean "the store failed", as opposed to a bug in the caller."""
    if isinstance(exc, KafkaStoreError):
        return False
    if isinstance(exc, (OSError, EOFError)):
        return True
    return type(exc).__module__.split(".", 1)[0] in _CLIENT_MODULES


#: The verbs of :meth:`Storage._failures` that write: the ack path's are marked in flight.
_WRITE_VERBS = frozenset({"write", "create"})


@contextlib.contextmanager
def _io_turn(verb: str):
    """One storage call's turn: in the housekeeping lane it first lets the ack path's writes
    in flight pass (bounded: :func:`kafkastore.threads.yield_to_foreground`), so housekeeping
    runs in the gaps between produce commits; a write of the default lane is marked in
    flight for as long as it runs. A housekeeping commit's create does not wait: it holds
    the partition's commit turn, which the ack path's next commit waits for."""
    if current_lane() == HOUSEKEEPING:
        if verb != "create":
            yield_to_foreground()
        yield
    elif verb in _WRITE_VERBS:
        with foreground_io():
            yield
    else:
        yield


class Storage:
    """A root URL on an fsspec filesystem.

    ``storage_options`` go to the filesystem (for S3, s3fs keyword arguments such
    as ``client_kwargs={"endpoint_url": ...}``); ``fs`` substitutes a ready
    filesystem, which is how tests inject faults (see ``tests/faults.py``).
    """

    #: Upload times older than this are forgotten (:meth:`upload_time` then asks the store).
    _PUT_TIMES_KEEP_S = 3600.0

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *, fs=None,
                 clock=None, create: bool = True):
        self.protocol, self._base = _split_url(url)
        #: The process's clock (:mod:`kafkastore.clock`; an old bare callable is read as epoch
        #: seconds). Components built on this storage default to it, so the entry point that
        #: makes the Storage injects time for everything below it; tests age uploads with it.
        self.clock: Clock = as_clock(clock, "s")
        # rel path -> clock.wall_ms() when this process started writing it (see upload_time).
        self._put_times: dict[str, int] = {}
        self._put_times_lock = threading.Lock()   # puts may run on several threads at once
        self.url = url if "://" in url else f"file://{self._base}"
        self.storage_options = dict(storage_options or {})
        if fs is not None:
            self.fs = fs
        else:
            options = dict(self.storage_options)
            if self.protocol == "s3":
                # Another process may commit a manifest at any time: a cached
                # directory listing would hide it, so never reuse listings.
                options.setdefault("use_listings_cache", False)
            try:
                self.fs = fsspec.filesystem(self.protocol, **options)
            except (ImportError, TypeError, ValueError) as exc:
                raise ConfigError(f"cannot open storage {url!r}: {exc}") from None
        #: The filesystem conditional creates (commit points) go through: on S3 a client whose
        #: retries and timeouts are bounded (:data:`COMMIT_PUT_S3_CONFIG`), so one attempt of a
        #: commit takes at most :data:`MAX_COMMIT_PUT_S` and the engine, not the client, owns
        #: retries and reads back what it cannot tell (docs/DESIGN.md section 9).
        self._commit_fs = self.fs if fs is not None or self.protocol != "s3" else bounded_s3(
            self.storage_options)
        self._housekeeping: "Storage | None" = None
        self._housekeeping_lock = threading.Lock()
        if self.protocol == "file" and create:  # read-only users pass create=False
            try:
                os.makedirs(self._base, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create storage root {self._base!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    def __reduce__(self):
        # Storage objects travel to Spark executors: rebuild from URL and options.
        return (Storage, (self.url, self.storage_options))

    def for_housekeeping(self) -> "Storage":
        """The storage background housekeeping (merging, gc) works through: on S3 a twin of
        this one with its own clients, connection pools and event-loop thread
        (:func:`housekeeping_loop`), so a merge's gets and puts and gc's deletes never queue
        in front of a produce commit's requests; elsewhere (and with an injected filesystem,
        which tests wrap faults around) this storage itself. Same root, options and clock:
        its commits are the same conditional creates through the same commit engine, and a
        manifest store on it shares this process's cached heads and commit turns."""
        if self.protocol != "s3" or self._commit_fs is self.fs:
            return self
        with self._housekeeping_lock:
            twin = self._housekeeping
            if twin is None or twin._pid != os.getpid():
                loop = housekeeping_loop()
                options = dict(self.storage_options)
                options.setdefault("use_listings_cache", False)
                fs = open_s3(self.url, options, loop=loop)
                twin = Storage(self.url, self.storage_options, fs=fs, clock=self.clock)
                twin._commit_fs = bounded_s3(self.storage_options, loop=loop)
                twin._pid = os.getpid()
                self._housekeeping = twin
            return twin

    def require_root(self) -> None:
        """Raise :class:`StorageError` if the root's bucket does not exist (object stores),
        so that listing a misspelt bucket is an error rather than an empty answer."""
        missing = self._missing_bucket(cannot_tell=None)
        if missing is not None:
            raise missing

    def _missing_bucket(self, cannot_tell: BaseException | None = None) -> BucketNotFoundError | None:
        """:class:`BucketNotFoundError` if the root's bucket does not exist (object stores),
        else None. Called when the store answered "not found" or an empty listing, which
        is all a missing bucket answers; a bucket once found is not asked about again.
        If the check itself fails: ``cannot_tell`` is None re-raises that failure, else None."""
        if self.protocol in ("file", "local", "memory"):
            return None
        bucket = self._base.split("/", 1)[0]
        if (self.protocol, bucket) in _BUCKETS_FOUND:
            return None
        try:
            with self._failures("stat bucket", bucket, bucket_check=False):
                found = self.fs.exists(bucket)
        except StorageError:
            if cannot_tell is None:
                raise
            return None
        if found:
            _BUCKETS_FOUND.add((self.protocol, bucket))
            return None
        return BucketNotFoundError(f"bucket {bucket!r} of {self.url} does not exist")

    def _raise_if_no_bucket(self, empty):
        """``empty`` (an empty answer), unless the bucket is missing: then BucketNotFoundError."""
        missing = self._missing_bucket(cannot_tell=StorageError("bucket check failed"))
        if missing is not None:
            raise missing
        return empty

    # -- paths -------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """Filesystem path (without protocol) of ``rel`` under the root."""
        rel = rel.strip("/")
        return f"{self._base}/{rel}" if rel else self._base

    def child(self, rel: str) -> "Storage":
        """A Storage rooted at ``rel`` below this one, sharing the filesystem and clock."""
        base = self.full_path(rel)
        url = f"file://{base}" if self.protocol == "file" else f"{self.protocol}://{base}"
        return Storage(url, self.storage_options, fs=self.fs, clock=self.clock)

    def _rel(self, full: str) -> str:
        # fsspec spells paths with or without a leading "/" depending on the backend.
        root = self._base.strip("/")
        full = full.strip("/")
        return full[len(root):].lstrip("/") if root else full

    def _fail(self, verb: str, rel: str, exc: BaseException) -> StorageError:
        if isinstance(exc, PermissionError):
            return StoragePermissionError(f"permission denied: cannot {verb} {rel!r} under "
                                          f"{self.url}: {exc}")
        return StorageError(f"cannot {verb} {rel!r} under {self.url}: {exc}")

    @contextlib.contextmanager
    def _failures(self, verb: str, rel: str, *, missing: bool = False, bucket_check: bool = True):
        """Turn a store's failure inside the block into :class:`StorageError` (naming
        ``verb`` and ``rel``); ``missing=True``: a missing object into
        :class:`ObjectNotFoundError`; "not found" from a bucket that does not exist into
        :class:`BucketNotFoundError`. Caller bugs and our own errors pass through."""
        try:
            with _io_turn(verb), \
                    (MEMORY_LOCK if isinstance(self.fs, MemoryFileSystem) else _UNGUARDED):
                yield
        except Exception as exc:
            if bucket_check and isinstance(exc, FileNotFoundError):
                no_bucket = self._missing_bucket(cannot_tell=exc)
                if no_bucket is not None:
                    raise no_bucket from None
            if missing and isinstance(exc, FileNotFoundError):
                raise ObjectNotFoundError(f"no object {rel!r} under {self.url}") from None
            if not _is_store_failure(exc):
                raise
            raise self._fail(verb, rel, exc) from exc

    # -- reads -------------------------------------------------------------
    def get(self, rel: str) -> bytes:
        """Whole object; :class:`ObjectNotFoundError` if absent."""
        with self._failures("read", rel, missing=True):
            # s3fs asks for the size first (a HEAD, to split big objects into concurrent
            # ranges) unless told one stream: one GET instead of two requests per read.
            one = {"max_concurrency": 1} if hasattr(self.fs, "max_concurrency") else {}
            return bytes(self.fs.cat_file(self.full_path(rel), **one))

    def get_range(self, rel: str, start: int, end: int, *, writable: bool = False):
        """Bytes ``[start, end)`` of an object (shorter, possibly empty, if the object is shorter).

        ``writable=True``: the caller wants memory it may write to (a decoder that writes
        its output into its input): local files are read straight into fresh writable
        memory (a memoryview of an anonymous mapping); other stores hand back their bytes
        as usual (making them writable would cost a copy)."""
        if start < 0 or end < 0:
            raise ValueError(f"byte range must be non-negative, got [{start}, {end})")
        if end <= start:
            return b""
        with self._failures("read", rel, missing=True):
            try:
                if writable and isinstance(self.fs, LocalFileSystem):
                    return _read_into_fresh_memory(self.fs, self.full_path(rel), start, end)
                return bytes(self.fs.cat_file(self.full_path(rel), start=start, end=end))
            except OSError as exc:
                # S3 answers 416 (EINVAL) for a range that starts at or past the end.
                if exc.errno == errno.EINVAL and start >= self.size(rel):
                    return b""
                raise

    def exists(self, rel: str) -> bool:
        """Whether an object (or directory) ``rel`` exists."""
        with self._failures("stat", rel):
            found = bool(self.fs.exists(self.full_path(rel)))
        return found or self._raise_if_no_bucket(found)

    def size(self, rel: str) -> int:
        """Size of object ``rel`` in bytes; :class:`ObjectNotFoundError` if absent."""
        with self._failures("stat", rel, missing=True):
            return int(self.fs.size(self.full_path(rel)))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Objects directly or indirectly under directory ``prefix``, sorted by path.

        Temporary files of in-flight local writes are not listed.
        """
        base = self.full_path(prefix)
        with self._failures("list", prefix):
            found = self._find(base)
        if not found:
            return self._raise_if_no_bucket([])
        out = []
        for full, info in found.items():
            if info.get("type") == "directory":
                continue
            rel = self._rel(full)
            if rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                continue
            out.append(ObjectInfo(rel, int(info.get("size") or 0), _mtime(info)))
        out.sort(key=lambda o: o.path)
        return out

    def _find(self, base: str) -> dict:
        # fsspec's memory:// store is one dict shared by the process; a write from another
        # thread while it is listed raises RuntimeError mid-iteration. A listing is a
        # snapshot anyway: take it again (object stores and local disks never raise this).
        parent, _, name = base.rstrip("/").rpartition("/")
        if parent and name and _is_s3fs(self.fs):
            # The objects under ``base/`` in one listing request: s3fs's find of a path whose
            # listing is empty also asks whether the path itself is an object or a directory
            # (a HEAD, then a listing of one key): three requests for every empty directory
            # (a partition with no version yet, a document with no entries), each paid
            # under the store's latency.
            return self.fs.find(parent, prefix=name + "/", detail=True)
        for attempt in range(10):
            try:
                return self.fs.find(base, detail=True)
            except FileNotFoundError:
                return {}
            except RuntimeError as exc:
                if "changed size during iteration" not in str(exc) or attempt == 9:
                    raise
        return {}

    def list_dirs(self, prefix: str = "") -> list[str]:
        """Names of the immediate subdirectories of ``prefix``."""
        with self._failures("list", prefix):
            try:
                entries = self.fs.ls(self.full_path(prefix), detail=True)
            except FileNotFoundError:
                entries = []
        if not entries:
            return self._raise_if_no_bucket([])
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries
                      if e.get("type") == "directory")

    # -- writes ------------------------------------------------------------
    def put(self, rel: str, data: bytes) -> None:
        """Write an object whole, replacing any previous one; readers never see a partial object.

        The time the write started is remembered for :meth:`upload_time`.
        """
        started = self.clock.wall_ms()
        with self._failures("write", rel):
            write_object(self.fs, self.full_path(rel), bytes(data), exclusive=False)
        self._remember_put(rel.strip("/"), started)

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        """:meth:`put` of several objects ``(rel, data)``, in order. ``data`` may be any
        bytes-like object, or a tuple or list of them (the object is their bytes one after
        another: local files write them with one ``writev``, without joining them); it must
        not change until this returns.

        On local files this is cheaper than as many :meth:`put` calls and as
        durable: each file is fsynced, and each directory once after all the
        renames (see docs/DECISIONS.md), before this returns. Elsewhere it is
        those :meth:`put` calls.
        """
        items = list(items)
        if not (isinstance(self.fs, LocalFileSystem)
                and getattr(self.fs, "kafkastore_write", None) is None):
            for rel, data in items:
                self.put(rel, b"".join(data) if isinstance(data, (tuple, list)) else data)
            return
        started = self.clock.wall_ms()
        with self._failures("write", ", ".join(rel for rel, _ in items)):
            write_many_local([(self.full_path(rel), data) for rel, data in items])
        for rel, _ in items:
            self._remember_put(rel.strip("/"), started)

    def _remember_put(self, rel: str, started: int) -> None:
        times = self._put_times
        with self._put_times_lock:
            times.pop(rel, None)  # re-insert: the dict stays ordered by write time
            times[rel] = started
            if len(times) > 10_000 and len(times) % 1000 == 0:
                horizon = started - self._PUT_TIMES_KEEP_S * 1000
                for old in [k for k, t in times.items() if t < horizon]:
                    del times[old]

    def upload_time(self, rel: str) -> float:
        """When object ``rel`` was written, epoch seconds, as late as it can be wrong.

        For a write of this :class:`Storage` object, the :attr:`clock`'s wall time
        when the write started (the object's own time is later, so its age is
        never under-estimated); otherwise the store's modification time.
        :class:`ObjectNotFoundError` if the object does not exist (the
        manifest commit uses this to refuse listing files that are not there).
        """
        rel = rel.strip("/")
        known = self._put_times.get(rel)
        if known is not None:
            return known / 1000
        with self._failures("stat", rel, missing=True):
            info = self.fs.info(self.full_path(rel))
        mtime = _mtime(info)
        # No object time: assume the worst (written at the epoch), so a commit re-uploads.
        return mtime if mtime else 0.0

    def put_if_absent(self, rel: str, data: bytes) -> None:
        """Create ``rel`` with ``data`` only if it does not exist.

        Raises :class:`CommitConflict` if it exists. Any other failure raises
        :class:`StorageError`, and then the outcome is *unknown*: the object may
        or may not have been created; callers decide by reading it back.
        """
        with self._failures("create", rel):
            try:
                write_object(self._commit_fs, self.full_path(rel), bytes(data), exclusive=True)
            except FileExistsError:
                raise CommitConflict(f"{rel!r} already exists under {self.url}") from None

    #: Where :meth:`clock_skew_ms` writes its probe objects (removed at once).
    CLOCK_PROBE_DIR = "_clock"

    def clock_skew_ms(self) -> int:
        """How far this process's wall clock (:attr:`clock`) is ahead of the store's own clock
        (negative: behind), measured by writing a small probe object and reading the time the
        store gave it. Object times are what gc ages files by, so this is the error a
        process's clock adds to every age it computes. One put, one stat and one delete."""
        rel = f"{self.CLOCK_PROBE_DIR}/probe-{uuid.uuid4().hex}"
        before = self.clock.wall_ms()
        self.put(rel, b"")
        after = self.clock.wall_ms()
        try:
            with self._failures("stat", rel, missing=True):
                stored_ms = int(_mtime(self.fs.info(self.full_path(rel))) * 1000)
        finally:
            self.delete(rel)
        if not stored_ms:
            raise StorageError(f"the store gave the clock probe {rel!r} no time under {self.url}")
        # The store stamped the object between before and after: take the midpoint, and
        # allow for the store's whole-second times (S3's Last-Modified).
        return (before + after) // 2 - stored_ms

    def delete(self, rels: Iterable[str]) -> None:
        """Delete objects, in the given order; missing ones are ignored (deletes are idempotent)."""
        if isinstance(rels, str):
            rels = [rels]
        pace = current_lane() == HOUSEKEEPING and isinstance(self.fs, LocalFileSystem)
        for rel in rels:
            with self._put_times_lock:  # a put may be pruning the dict on another thread
                self._put_times.pop(rel.strip("/"), None)
            with self._failures("delete", rel), contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.full_path(rel))
            if pace:
                pace_local_delete(self.full_path(rel))


def _is_s3fs(fs) -> bool:
    """Whether ``fs`` is s3fs's own filesystem (not a wrapper around it, whose ``find`` may
    not take s3fs's ``prefix``)."""
    return type(fs).__module__.split(".", 1)[0] == "s3fs"


def _mtime(info: dict) -> float:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def _read_into_fresh_memory(fs, path: str, start: int, end: int) -> memoryview:
    """``[start, end)`` of a local file read into an anonymous mapping (writable, and not
    zero-filled first as a bytearray would be), as a memoryview of the bytes read."""
    import mmap

    buf = mmap.mmap(-1, end - start)
    view = memoryview(buf)
    n = 0
    with fs.open(path, "rb") as f:
        f.seek(start)
        while n < len(view):
            got = f.readinto(view[n:])
            if not got:
                break
            n += got
    return view[:n]
