"""Topics: create, list, describe, alter; their metadata lives in ``topics/<t>/_topic.json``.

``_topic.json`` (written with put-if-absent, so of two racing creates one
gets :class:`TopicExistsError`)::

    {"format": 2, "topic": "orders", "partitions": 3,
     "config": {"cleanup.policy": "compact", "retention.ms": 86400000},
     "created_ms": 1700000000000, "updated_ms": 1700000000000,
     "id": "<32 hex digits: the topic id, random (uuid4), chosen at creation>"}

``config`` holds only overrides of Kafka's defaults. Offsets are not stored here; they
come from each partition's manifest.

Changes (:func:`update_topic`, :func:`alter_topic`) are conditional commits, never an
overwrite: a changed topic's metadata is a sequence of immutable versions, each a full
snapshot, kept as :class:`kafkastore.cluster.documents.ClusterDocument` keeps the cluster's
documents::

    topics/<t>/_topic.json                    {"format": 3, "incarnation": "c<created_ms>",
                                               ...the metadata before the first change}
    topics/<t>/_meta/<incarnation>/v<20 digits>.json   {"name", "version", "id", "doc"}
    topics/<t>/_meta/<incarnation>/_head.json          {"version": N}   (hint, overwritten)

A change reads the head N, applies a pure function to it and creates version N+1 with
put-if-absent; of two racing changes one wins and the other re-reads and re-applies
(a change that no longer applies raises, e.g. :class:`InvalidPartitionsError`), so no
update is lost. A read is ``_topic.json``, the hint, version N and a probe of N+1
(versions are never pruned, so an absent successor is the head; the hint bounds the probe).
A topic never changed keeps its format-2 ``_topic.json`` and is read in one request; its
first change moves ``_topic.json`` to format 3 (one overwrite with bytes that depend only on
what it held, so racing first changes write the same object and then meet on version 1).
The incarnation (from ``created_ms``) keeps a re-created topic from reading the versions of
a deleted one of the same name. kafkastore before format 3 refuses such a topic
("unsupported format 3") instead of overwriting it: see docs/DECISIONS.md, "Topic changes".

Format 2 says the topic's manifests may hold format-2 (delta) versions. kafkastore before
them reads only format 1 and refuses anything else, so the bump fences it off the topic
(its gc would otherwise expire the versions a delta needs without reading them): new
topics are written as format 2, and an old topic's file is moved to 2 right before the
first format-2 manifest version of any of its partitions
(:func:`kafkastore.manifest.upgrade.fence_old_readers`, re-exported here).

Deleting a topic (:func:`delete_topic`) is first a commit on every partition's manifest (a
tombstone: no segments, log start at the high watermark, ``extra["deleted"]``), then the
removal of ``_topic.json``. Every writer commits through the manifest, so a write racing the
delete either lands before the tombstone (and goes with the topic) or re-reads and gets
:class:`TopicDeletedError` (never acknowledged). See docs/DECISIONS.md, "Deleting a topic".
"""
from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .. import layout
from ..cluster.documents import ClusterDocument
from ..commit import CommitEngine, ObjectTarget
from ..errors import (ConfigError, InternalTopicError, InvalidPartitionsError, ObjectNotFoundError,
                      StorageError, TopicExistsError, UnknownTopicError)
from ..manifest import (AdvanceLogStart, CorruptMetadataError, Manifest, ManifestStore, SetExtra,
                        UpdateProducerState)
from ..manifest.upgrade import (VERSIONED_TOPIC_FORMAT, fence_old_readers,  # noqa: F401 (re-exported)
                               write_versioned)
from ..storage import Storage, _mtime
from .topic_config import TopicConfig

TOPIC_FORMAT = 2
#: ``_topic.json`` formats this code reads (1: written before delta manifest versions,
#: 3: versioned metadata).
READABLE_TOPIC_FORMATS = (1, 2, 3)
#: The directory of a topic's metadata versions, one subdirectory per incarnation.
META_DIR = "_meta"
_INCARNATION_RE = re.compile(r"^c\d{1,20}$")

#: The topics kafkastore itself writes (Kafka's internal topics). Clients may read them but
#: never produce to, create or delete them; only their owner (e.g.
#: :class:`kafkastore.groups.offsets.OffsetsStore`) opts in to writing.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                             "_schemas"})  # _schemas: kafkastore.schema_registry

#: The manifest ``extra`` key of a deletion tombstone.
DELETED_KEY = "deleted"


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is an internal topic (:data:`INTERNAL_TOPICS`): the one predicate for
    the library, the CLI and the protocol server."""
    return name in INTERNAL_TOPICS


def check_not_internal(name: str, action: str) -> None:
    """Raise :class:`InternalTopicError` if ``name`` is internal; ``action`` says what was refused
    (``"produce to"``, ``"delete"``...)."""
    if is_internal_topic(name):
        raise InternalTopicError(f"cannot {action} internal topic {name!r}: "
                                 f"only kafkastore writes it")


@dataclass(frozen=True)
class TopicMetadata:
    """What ``_topic.json`` says: name, partition count, config overrides."""

    name: str
    partitions: int
    config: TopicConfig = field(default_factory=TopicConfig)
    created_ms: int = 0
    updated_ms: int = 0
    #: The topic's id (KIP-516), random as Kafka's, chosen at creation: 32 hex digits. None
    #: for topics created before ids were stored (their id is derived from name and
    #: creation time, :func:`kafkastore.protocol.placement.topic_id_of`).
    topic_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored ``_topic.json`` shape."""
        d = {"format": TOPIC_FORMAT, "topic": self.name, "partitions": self.partitions,
             "config": self.config.to_dict(), "created_ms": self.created_ms,
             "updated_ms": self.updated_ms}
        if self.topic_id is not None:
            d["id"] = self.topic_id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TopicMetadata":
        """Parse ``_topic.json``; :class:`CorruptMetadataError` on a bad shape."""
        try:
            if d.get("format") not in READABLE_TOPIC_FORMATS:
                raise ValueError(f"unsupported format {d.get('format')!r}")
            partitions = d["partitions"]
            if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
                raise ValueError(f"bad partition count {partitions!r}")
            return cls(name=layout.validate_topic_name(d["topic"]), partitions=partitions,
                       config=TopicConfig.from_dict(d.get("config") or {}),
                       created_ms=int(d.get("created_ms", 0)), updated_ms=int(d.get("updated_ms", 0)),
                       topic_id=_topic_id(d.get("id")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # ConfigError is a ValueError
            raise CorruptMetadataError(f"bad topic metadata: {exc}") from None


def _topic_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{32}", value):
        raise ValueError(f"bad topic id {value!r}")
    return value


@dataclass(frozen=True)
class PartitionOffsets:
    """Log start offset and high watermark of one partition (0, 0 before the first commit)."""

    partition: int
    log_start_offset: int
    high_watermark: int
    segments: int = 0
    size: int = 0
    manifest_version: int = 0


@dataclass(frozen=True)
class TopicInfo:
    """A described topic: metadata plus per-partition offsets from the manifests."""

    name: str
    partitions: int
    config: TopicConfig
    offsets: tuple[PartitionOffsets, ...] = ()
    created_ms: int = 0

    def to_dict(self, include_defaults: bool = False) -> dict[str, Any]:
        """JSON-ready form; ``offsets`` keyed by partition number as a string (like ``kafkastore offsets``)."""
        return {
            "topic": self.name,
            "partitions": self.partitions,
            "config": self.config.to_dict(include_defaults),
            "offsets": {str(o.partition): {"log_start_offset": o.log_start_offset,
                                           "high_watermark": o.high_watermark,
                                           "segments": o.segments, "size": o.size}
                        for o in self.offsets},
        }


def _check_partitions(partitions: Any) -> int:
    if isinstance(partitions, str) and partitions.strip().isdigit():
        partitions = int(partitions)
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise ConfigError(f"invalid partition count {partitions!r}: expected an integer >= 1")
    return partitions


def create_topic(storage: Storage, name: str, partitions: int = 1,
                 configs: Mapping[str, Any] | TopicConfig | None = None, *,
                 now_ms: int | None = None) -> TopicMetadata:
    """Create a topic; :class:`TopicExistsError` if it is there, :class:`ConfigError` on bad input."""
    layout.validate_topic_name(name)
    partitions = _check_partitions(partitions)
    config = configs if isinstance(configs, TopicConfig) else TopicConfig.from_dict(configs or {})
    now = storage.clock.wall_ms() if now_ms is None else int(now_ms)
    meta = TopicMetadata(name, partitions, config, created_ms=now, updated_ms=now,
                         topic_id=uuid.uuid4().hex)
    # A delete that stopped after removing _topic.json but before tombstoning every
    # partition is finished first, so the new topic never shows the old one's records.
    # (The guard narrows a race with a concurrent create of the same name to one request.)
    parts = _partition_dirs(storage, name)  # a new name has none: no manifest reads below
    if parts and not topic_exists(storage, name):
        mark, exists = _tombstone_mark(now, of=None), (lambda: topic_exists(storage, name))
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(parts)))) as pool:
            list(pool.map(lambda p: _tombstone(storage, name, p, mark, guard=exists), parts))
    try:
        created = CommitEngine().run(_TopicCreate(storage, meta))
    except TopicExistsError:
        # A create that stopped between writing _topic.json and clearing the tombstones
        # left partitions that refuse writes: a re-run finishes it, then says it exists.
        existing = load_topic(storage, name)
        _clear_tombstones(storage, name, range(existing.partitions), existing.created_ms)
        raise
    _clear_tombstones(storage, name, [p for p in parts if p < partitions], created.created_ms)
    return created


class _TopicCreate(ObjectTarget):
    """Creating ``_topic.json`` with put-if-absent: the current state is whether it exists,
    and a topic that exists refuses the create. Equal bytes read back are the same topic."""

    def __init__(self, storage: Storage, meta: TopicMetadata):
        super().__init__(storage)
        self.meta = meta

    def read(self) -> bool:
        return self.storage.exists(layout.topic_meta_path(self.meta.name))

    def plan(self, exists: bool, attempt: int) -> TopicMetadata:
        if exists:
            raise TopicExistsError(f"topic {self.meta.name!r} already exists")
        return self.meta

    def locate(self, meta: TopicMetadata) -> tuple[str, bytes]:
        return layout.topic_meta_path(meta.name), _encode(meta)


class _TopicVersions(ClusterDocument):
    """The versions of one topic incarnation's metadata: a :class:`ClusterDocument` stored
    under ``topics/<t>/_meta/<incarnation>/`` whose version 0 is ``base`` (what
    ``_topic.json`` holds). Versions are never pruned (a topic changes rarely; a version is
    a few hundred bytes; deleting the topic removes them), so the head is found from the
    hint by probing forward, without listing."""

    def __init__(self, storage: Storage, name: str, incarnation: str, base: dict):
        super().__init__(storage, "topic", max_age_s=0)
        self.name = name  # stored in and checked against every version
        self.dir = versions_dir(name, incarnation)
        self._base = base
        self._doc = base

    def _read_head(self) -> tuple[int, dict]:
        version, doc = self._version, self._doc
        if version == 0:
            hint = self._read_hint()
            if hint:
                try:
                    version, doc = hint, self._read_version(hint)
                except ObjectNotFoundError:  # only while the topic is deleted: probe from 0
                    version, doc = 0, self._base
        while True:
            try:
                doc = self._read_version(version + 1)
            except ObjectNotFoundError:
                return version, doc
            version += 1

    def _after_commit(self, version: int) -> None:
        try:
            self.storage.put(f"{self.dir}/_head.json", json.dumps({"version": version}).encode())
        except StorageError:  # advisory: readers probe forward from an older hint
            pass


def versions_dir(name: str, incarnation: str) -> str:
    """Relative directory of the metadata versions of one incarnation of topic ``name``."""
    return f"{layout.topic_dir(name)}/{META_DIR}/{incarnation}"


def _read_topic_file(storage: Storage, name: str) -> dict:
    """``_topic.json`` as stored; :class:`UnknownTopicError` if there is no such topic."""
    layout.validate_topic_name(name)
    path = layout.topic_meta_path(name)
    try:
        data = storage.get(path)
    except ObjectNotFoundError:
        known = list_topics(storage)
        hint = f" (topics: {', '.join(known)})" if known else " (no topics yet)"
        raise UnknownTopicError(f"unknown topic {name!r} under {storage.url}{hint}") from None
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptMetadataError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CorruptMetadataError(f"{path} is not a JSON object")
    return doc


def _versions_of(storage: Storage, name: str, doc: dict) -> _TopicVersions | None:
    """The versions a format-3 ``_topic.json`` points at (None for formats 1 and 2)."""
    if doc.get("format") != VERSIONED_TOPIC_FORMAT:
        return None
    incarnation = doc.get("incarnation")
    if not isinstance(incarnation, str) or not _INCARNATION_RE.match(incarnation):
        raise CorruptMetadataError(f"{layout.topic_meta_path(name)}: bad incarnation {incarnation!r}")
    return _TopicVersions(storage, name, incarnation, doc)


def _make_versioned(storage: Storage, name: str, doc: dict) -> dict:
    """Move a format-1/2 ``_topic.json`` holding ``doc`` to format 3; returns what it wrote.

    The bytes depend only on ``doc``, so racing first changes write the same object; the
    incarnation comes from ``created_ms``, which no change alters.
    """
    meta = TopicMetadata.from_dict(doc)  # refuse to build on a damaged file
    if meta.name != name:
        raise CorruptMetadataError(f"{layout.topic_meta_path(name)} describes topic {meta.name!r}")
    return write_versioned(storage, name, doc, meta.created_ms)


def load_topic(storage: Storage, name: str) -> TopicMetadata:
    """The topic's metadata (the head version once it was changed); :class:`UnknownTopicError`
    if there is no such topic."""
    doc = _read_topic_file(storage, name)
    versions = _versions_of(storage, name, doc)
    meta = TopicMetadata.from_dict(doc if versions is None else versions.refresh())
    if meta.name != name:
        raise CorruptMetadataError(f"{layout.topic_meta_path(name)} describes topic {meta.name!r}")
    return meta


def topic_exists(storage: Storage, name: str) -> bool:
    """Whether ``_topic.json`` exists for ``name``."""
    return storage.exists(layout.topic_meta_path(layout.validate_topic_name(name)))


def list_topics(storage: Storage) -> list[str]:
    """Names of the topics under the root (directories that hold a ``_topic.json``), sorted."""
    names = []
    for d in storage.list_dirs(layout.TOPICS_DIR):
        try:
            layout.validate_topic_name(d)
        except ConfigError:
            continue
        names.append(d)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        present = list(pool.map(lambda n: storage.exists(layout.topic_meta_path(n)), names))
    return [n for n, ok in zip(names, present) if ok]


def partition_offsets(storage: Storage, name: str, partition: int) -> PartitionOffsets:
    """Offsets of one partition from its latest manifest."""
    m = ManifestStore(storage, name, partition).latest()
    if m is None:
        return PartitionOffsets(partition, 0, 0)
    return PartitionOffsets(partition, m.log_start_offset, m.high_watermark,
                            len(m.segments), m.size, m.version)


def describe_topic(storage: Storage, name: str) -> TopicInfo:
    """Metadata plus log start offset and high watermark of every partition."""
    meta = load_topic(storage, name)
    with ThreadPoolExecutor(max_workers=max(1, min(8, meta.partitions))) as pool:
        offsets = tuple(pool.map(lambda p: partition_offsets(storage, name, p), range(meta.partitions)))
    return TopicInfo(meta.name, meta.partitions, meta.config, offsets, meta.created_ms)


def update_topic(storage: Storage, name: str,
                 change: Callable[[TopicMetadata], TopicMetadata], *,
                 now_ms: int | None = None) -> TopicMetadata:
    """Apply ``change`` to the topic's metadata as a conditional commit; returns the result.

    ``change`` is pure: it gets the metadata as committed now and returns the new one (its
    errors propagate; returning it unchanged commits nothing). On a lost race it runs again
    on the newer metadata, so concurrent changes on any broker all land (module docstring).
    Partitions can only be added, as in Kafka (:class:`InvalidPartitionsError`).
    """
    doc = _read_topic_file(storage, name)
    versions = _versions_of(storage, name, doc)
    if versions is None:  # the first change: move _topic.json to format 3
        versions = _versions_of(storage, name, _make_versioned(storage, name, doc))
    now = storage.clock.wall_ms() if now_ms is None else int(now_ms)
    applied: list[tuple[TopicMetadata, TopicMetadata]] = []  # (before, after) of the last plan

    def apply(d: dict) -> dict:
        old = TopicMetadata.from_dict(d)
        new = change(old)
        if new.name != old.name or new.created_ms != old.created_ms:
            raise ConfigError(f"a change of topic {name!r} cannot rename or re-create it")
        if new.partitions < old.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {old.partitions} partitions; the partition count can "
                f"only grow, got {new.partitions}")
        applied[:] = [(old, new)]
        if (new.partitions, new.config) == (old.partitions, old.config):
            return d  # nothing to commit
        return TopicMetadata(name, new.partitions, new.config, created_ms=old.created_ms,
                             updated_ms=now).to_dict()

    result = TopicMetadata.from_dict(versions.update(apply))
    old = applied[0][0] if applied else result
    if result.partitions > old.partitions:  # added partitions may hold a past incarnation's tombstones
        _clear_tombstones(storage, name, range(old.partitions, result.partitions), result.created_ms)
    return result


def alter_topic(storage: Storage, name: str, *, set_configs: Mapping[str, Any] | None = None,
                delete_configs: Iterable[str] = (), replace_configs: Mapping[str, Any] | None = None,
                configs_from: Callable[[TopicConfig], Mapping[str, Any]] | None = None,
                partitions: int | None = None, require_growth: bool = False,
                now_ms: int | None = None) -> TopicMetadata:
    """Change config overrides and/or grow the partition count (:func:`update_topic`).

    On the metadata as committed when the change lands: ``replace_configs`` become the
    overrides (Kafka's AlterConfigs), or ``configs_from(config)`` does (computed from the
    current config, e.g. IncrementalAlterConfigs), then ``set_configs`` are set and
    ``delete_configs`` go back to defaults. ``partitions`` must not be fewer than the
    topic has (:class:`InvalidPartitionsError`), nor equal with ``require_growth`` (Kafka's
    CreatePartitions: a racing request that already grew the topic makes this one fail).
    """
    count = None if partitions is None else _check_partitions(partitions)
    sets, deletes = dict(set_configs or {}), list(delete_configs)
    if replace_configs is not None:
        TopicConfig.from_dict(replace_configs)  # bad input fails before any write
    if sets or deletes:
        TopicConfig().with_updates(sets, [])

    def change(meta: TopicMetadata) -> TopicMetadata:
        config = meta.config
        if replace_configs is not None:
            config = TopicConfig.from_dict(replace_configs)
        if configs_from is not None:
            config = TopicConfig.from_dict(configs_from(config))
        config = config.with_updates(sets, deletes)
        grown = meta.partitions
        if count is not None:
            if count < meta.partitions or (require_growth and count == meta.partitions):
                raise InvalidPartitionsError(
                    f"topic {name!r} has {meta.partitions} partitions; the partition count "
                    f"can only grow, got {count}")
            grown = count
        return TopicMetadata(name, grown, config, meta.created_ms, meta.updated_ms)

    return update_topic(storage, name, change, now_ms=now_ms)


def delete_topic(storage: Storage, name: str, *, allow_internal: bool = False,
                 now_ms: int | None = None) -> list[int]:
    """Delete a topic for every reader and writer; returns the partitions tombstoned.

    First every partition's manifest gets a tombstone version (no segments, log start at the
    high watermark, producer state dropped, ``extra["deleted"]``), then ``_topic.json`` goes.
    A writer racing the delete either committed before the tombstone (its records go with the
    topic) or gets :class:`TopicDeletedError` (nothing acknowledged). Segment files are left to
    ``gc`` (no longer listed), never deleted under a live manifest. A delete that stopped part
    way is finished by the next delete (or create) of the same name.

    :class:`UnknownTopicError` if there is no such topic (and nothing left to finish),
    :class:`InternalTopicError` for an internal topic unless ``allow_internal``.
    """
    layout.validate_topic_name(name)
    if not allow_internal:
        check_not_internal(name, "delete")
    now = storage.clock.wall_ms() if now_ms is None else int(now_ms)
    try:
        meta: TopicMetadata | None = load_topic(storage, name)
        versions = _versions_of(storage, name, _read_topic_file(storage, name))
    except UnknownTopicError:
        meta, versions = None, None
    parts = sorted(set(range(meta.partitions) if meta else ()) | set(_partition_dirs(storage, name)))
    # The tombstones name the incarnation they delete (its created_ms, read from the store),
    # so a later create tells a delete of itself from one of a past incarnation without
    # comparing two machines' clocks. With no topic file (finishing a delete that stopped)
    # they delete no incarnation, and leave a topic that exists meanwhile alone.
    mark = _tombstone_mark(now, of=meta.created_ms if meta else None)
    guard = None if meta else (lambda: topic_exists(storage, name))
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(parts)))) as pool:
        done = list(pool.map(lambda p: _tombstone(storage, name, p, mark, guard=guard), parts))
    if meta is None:
        if not any(done):
            raise UnknownTopicError(f"unknown topic {name!r} under {storage.url}")
        return [p for p, d in zip(parts, done) if d]
    storage.delete([layout.topic_meta_path(name)])
    if versions is not None:  # only this incarnation's: a re-create has its own directory
        storage.delete([o.path for o in storage.list(versions.dir)])
    return parts


def deleted_partitions(storage: Storage, name: str) -> list[int]:
    """The tombstoned partitions of a deleted topic (no ``_topic.json``): what ``gc`` still has
    to collect. Empty if the topic exists or left nothing behind."""
    layout.validate_topic_name(name)
    if topic_exists(storage, name):
        return []
    out = []
    for p in _partition_dirs(storage, name):
        m = ManifestStore(storage, name, p).latest()
        if m is not None and m.extra.get(DELETED_KEY):
            out.append(p)
    return out


#: The tombstone mark's key naming the incarnation (``created_ms``) it deletes; ``None``
#: for a tombstone that deletes no incarnation (finishing a delete that stopped part way).
TOMBSTONE_OF_KEY = "of"


def _tombstone_mark(now_ms: int, *, of: int | None) -> dict[str, Any]:
    """A tombstone's mark: a unique id, when (informational: this machine's clock, never
    compared with another's) and which incarnation it deletes (``of``, its ``created_ms``)."""
    return {"id": uuid.uuid4().hex, "deleted_ms": int(now_ms), TOMBSTONE_OF_KEY: of}


def _deletes_incarnation(tomb: Any, created_ms: int,
                         tombstone_first: Callable[[], bool | None] = lambda: None) -> bool:
    """Whether a tombstone is a delete of the incarnation created at ``created_ms`` (which
    its create must leave), not one of a past incarnation (which the create clears).

    Decided by what the tombstone says it deletes, written from the topic file the delete
    read: never by comparing the deleting machine's clock with the creating one's (a delete
    by a machine whose clock was ahead would otherwise keep the re-created topic unwritable).
    Tombstones of kafkastore before the mark named its incarnation are ordered by the
    store's own object times (``tombstone_first()``: whether the tombstone's version was
    stored before ``_topic.json``; None when the store gives no times), and only failing
    those by the two machines' times.
    """
    if not isinstance(tomb, dict):
        return False
    if TOMBSTONE_OF_KEY in tomb:
        return tomb[TOMBSTONE_OF_KEY] is not None and tomb[TOMBSTONE_OF_KEY] == created_ms
    first = tombstone_first()
    if first is not None:
        return not first
    return int(tomb.get("deleted_ms", 0)) > created_ms


def _stored_ms(storage: Storage, rel: str) -> int | None:
    """The store's own time of object ``rel`` (ms), None if absent or not given."""
    try:
        info = storage.fs.info(storage.full_path(rel))
    except OSError:   # absent or unreachable: no order from the store's times
        return None
    return int(_mtime(info) * 1000) or None


def _partition_dirs(storage: Storage, name: str) -> list[int]:
    """Partition numbers with a directory under the topic (manifests of a past incarnation)."""
    return sorted(int(d) for d in storage.list_dirs(layout.topic_dir(name)) if d.isdigit())


def _tombstone(storage: Storage, name: str, partition: int, mark: Mapping[str, Any],
               guard=None) -> bool:
    """Commit a deletion tombstone on one partition; False if it already had one (or ``guard()``
    says to leave it, checked before every attempt)."""
    committed = []

    def build(m: Manifest | None):
        if m is not None and m.extra.get(DELETED_KEY):
            return None
        if guard is not None and guard():
            return None
        updates = [AdvanceLogStart(m.high_watermark)] if m is not None else []
        updates += [UpdateProducerState(pid, None) for pid in (m.producers if m else ())]
        committed.append(True)
        return updates + [SetExtra(DELETED_KEY, dict(mark))], []

    # A full version: the versions before it (which list the deleted segments) then form
    # whole groups that expire after the grace period, so gc can collect their files; no
    # later commit would start a new group on a deleted topic.
    ManifestStore(storage, name, partition).commit(build, operation="delete-topic", full=True)
    return bool(committed)


def _clear_tombstones(storage: Storage, name: str, partitions: Iterable[int], created_ms: int) -> None:
    """Clear the tombstones of a past incarnation (any but the one created at ``created_ms``)
    on ``partitions``.

    Offsets continue from the old high watermark (the log start stays there): a manifest's
    high watermark never moves back, and a consumer's old committed offset then reads as out
    of range instead of silently skipping the new topic's first records.
    """
    def clear(p: int) -> None:
        store = ManifestStore(storage, name, p)

        def tombstone_first(m: Manifest) -> bool | None:
            tomb_ms = _stored_ms(storage, store.path(m.version))
            topic_ms = _stored_ms(storage, layout.topic_meta_path(name))
            return None if tomb_ms is None or topic_ms is None else tomb_ms < topic_ms

        def build(m: Manifest | None):
            tomb = m.extra.get(DELETED_KEY) if m is not None else None
            if not tomb:
                return None
            if _deletes_incarnation(tomb, created_ms, lambda: tombstone_first(m)):
                return None  # a delete of this very topic under way: leave it
            return [SetExtra(DELETED_KEY, None)], []
        store.commit(build, operation="create-topic")

    parts = list(partitions)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(parts)))) as pool:
        list(pool.map(clear, parts))


def _encode(meta: TopicMetadata) -> bytes:
    return json.dumps(meta.to_dict(), indent=1, sort_keys=False).encode()
