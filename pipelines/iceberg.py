"""Warehouse tables as Apache Iceberg tables, without Spark (DESIGN.md section 5).

Everything here runs in a plain Python process (the CLI, Airflow tasks, the
Spark driver): pyiceberg, pyarrow and fsspec, never pyspark.

**Opening a warehouse.** :class:`Warehouse` holds the warehouse URL, the
``catalog:`` section of the config (pyiceberg catalog properties: ``type``,
``uri``, ...) and the fsspec ``storage_options``. Without a ``catalog:`` section
a ``file://`` warehouse gets the embedded catalog, a SQL catalog on SQLite at
``<warehouse>/catalog.db`` with the warehouse as its root; any other warehouse
without a catalog is a :class:`ConfigError`. ``--table NAME`` means
``default.NAME``; ``ns.NAME`` is accepted (:func:`table_identifier`).
Read-only uses (:meth:`Warehouse.load_table`, :meth:`Warehouse.list_tables`,
:func:`committed_offsets`) create nothing: on an embedded warehouse that does not
exist yet they return ``None`` / ``[]``. Only :meth:`Warehouse.create_table`
creates the catalog database, the namespace and the table. Files are read and
written through pyiceberg's fsspec FileIO; ``storage_options`` of s3fs
(``key``, ``secret``, ``client_kwargs.endpoint_url``...) are mapped to
pyiceberg's ``s3.*`` properties (a ``catalog:`` section's own ``s3.*`` wins).

**Offsets live in the snapshot.** Every kafkastore commit is one Iceberg
snapshot (a reprocess: a delete snapshot and an append snapshot committed
together) whose summary carries

* ``kafkastore.offsets``: JSON ``{"<topic>": {"<partition>": <next offset>}}``,
  the full committed map of the table;
* ``kafkastore.run-id``, ``kafkastore.operation`` (``load`` / ``reprocess``);
* ``kafkastore.ranges``: JSON list of ``{"topic", "partition", "from", "until"}``;
* optionally ``kafkastore.gaps`` (offsets skipped because retention deleted
  them first) and ``kafkastore.audit`` (reprocess: requested and effective
  offsets, user, reason, flags).

A table's committed offsets (:func:`committed_offsets`) are those of the newest
snapshot in the ancestry of ``main`` (or another branch) carrying
``kafkastore.offsets``; snapshots of other engines (compaction rewrites,
expiry, manual fixes) are skipped, never read as "nothing loaded".

**Committing** (:func:`commit`): a :class:`KafkaCommit` is data (run id,
operation, ranges, Parquet files to add, rows to delete, schema to merge).
Each attempt reloads the table, checks whether the run id is already in main's
ancestry (then it is a no-op), validates the ranges against the committed
offsets with the pure function :func:`next_offsets` (overlap or gap refused),
merges the schema by name, builds one transaction and commits it. pyiceberg's
own retry re-applies a commit blindly, so every table kafkastore creates or
commits to has ``commit.retry.num-retries=0``; a :class:`CommitFailedException`
(another writer won) reaches :func:`commit`, which runs on kafkastore's one commit
engine (:mod:`kafkastore.commit`): it backs off (full jitter) and starts again
from the reload, giving up after ``max_attempts`` with
:class:`~kafkastore.errors.CommitGaveUpError`. Any other failure of the catalog
call has an unknown outcome: the engine reads the table back and looks for the
run id; it never deletes the data files (they may be referenced).

**Reading** (:func:`plan_scan`, :func:`read_arrow`): the data files of exactly
one snapshot, chosen by id, timestamp or ref name (branch or tag), as fsspec
URLs for engines that read Parquet by path (Spark here), refused with
:class:`UnsupportedDeletesError` when the snapshot has delete files; or an Arrow
read through pyiceberg, which applies positional deletes (and refuses what it
cannot apply).
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from kafkastore.commit import Backoff, Budget, Clock, CommitEngine, CommitTarget, Done
from kafkastore.errors import (BucketNotFoundError, CommitUnknownError, ConfigError,
                               ExpiredSnapshotError,
                               MissingDataFileError, OffsetGapError, OffsetOverlapError,
                               OrphanedTableError, SchemaEvolutionError, TableChangedError,
                               TableNotFoundError, UnsupportedDeletesError, WarehouseError)

from .iceberg_internals import check_schema_compatible, default_table_location
from .offset_ranges import (OffsetRange, TopicPartition, by_partition, offsets_from_json,
                            offsets_to_json)
from .table_layout import (DEFAULT_PARTITION_BY, parse_partition_field, table_identifier,
                           table_name)
from .warehouse.properties import (AUDIT_KEY, CARRY_OPERATIONS, GAPS_KEY, NO_BLIND_RETRY,
                                   OFFSETS_KEY, OPERATION_KEY, OPERATIONS, RANGES_KEY,
                                   RETRY_PROPERTY, RUN_ID_KEY, TABLE_PROPERTIES)

log = logging.getLogger(__name__)

CATALOG_DB = "catalog.db"
MAIN = "main"

FSSPEC_IO = "pyiceberg.io.fsspec.FsspecFileIO"


# ---------------------------------------------------------------------------
# names and catalogs


def missing_bucket(properties: Mapping[str, Any], url: str):
    """A :class:`~kafkastore.errors.BucketNotFoundError` when ``url``'s bucket does not
    exist (object stores; checked after a "not found", which is all a missing bucket
    answers), else None (also when the check itself fails)."""
    from kafkastore.errors import BucketNotFoundError
    from pyiceberg.io.fsspec import FsspecFileIO

    if "://" not in url or url.startswith(("file:", "memory:")):
        return None
    scheme, rest = url.split("://", 1)
    bucket = rest.split("/", 1)[0]
    try:
        found = FsspecFileIO(dict(properties)).get_fs(scheme).exists(bucket)
    except Exception:   # noqa: BLE001 - cannot tell: keep the original error
        return None
    if found:
        return None
    return BucketNotFoundError(f"bucket {bucket!r} of warehouse location {url} does not exist")


def _metadata_version(path: str) -> int:
    """The version number of ``.../00042-<uuid>.metadata.json`` (-1 when unnumbered)."""
    head = path.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else -1


def _local_path(url: str) -> str | None:
    if url.startswith("file://"):
        return url[len("file://"):]
    if "://" not in url:
        return os.path.abspath(url)
    return None


def io_properties(storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """pyiceberg FileIO properties from fsspec (s3fs) ``storage_options``."""
    so = dict(storage_options or {})
    ck = dict(so.get("client_kwargs") or {})
    props: dict[str, str] = {"py-io-impl": FSSPEC_IO}
    pairs = {"s3.access-key-id": so.get("key"), "s3.secret-access-key": so.get("secret"),
             "s3.session-token": so.get("token"),
             "s3.endpoint": so.get("endpoint_url") or ck.get("endpoint_url"),
             "s3.region": ck.get("region_name") or so.get("region_name")}
    props.update({k: str(v) for k, v in pairs.items() if v})
    return props


def catalog_properties(warehouse: str, catalog: Mapping[str, Any] | None = None,
                       storage_options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The pyiceberg catalog properties for ``warehouse`` (see the module docstring)."""
    props = io_properties(storage_options)
    if catalog:
        props.update({str(k): str(v) for k, v in catalog.items() if v is not None})
        props.setdefault("warehouse", warehouse)
        return props
    path = _local_path(warehouse)
    if path is None:
        raise ConfigError(f"warehouse {warehouse} is not local: configure its Iceberg catalog in "
                          f"the config file's 'catalog:' section (type: rest|sql|glue|hive, uri: ...)")
    props.update({"type": "sql", "uri": f"sqlite:///{os.path.join(path, CATALOG_DB)}",
                  "warehouse": "file://" + path.rstrip("/")})
    return props


class Warehouse:
    """A warehouse: its URL, its catalog (opened lazily) and storage options."""

    def __init__(self, url: str, catalog: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, Any] | None = None, name: str = "kafkastore"):
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.catalog_config = dict(catalog or {})
        self.properties = catalog_properties(self.url, self.catalog_config, self.storage_options)
        self.name = name
        self._catalog = None

    @classmethod
    def of(cls, warehouse, catalog: Mapping[str, Any] | None = None,
           storage_options: Mapping[str, Any] | None = None) -> "Warehouse":
        """``warehouse`` itself when it is a Warehouse, else one opened at that URL
        (the jobs accept either)."""
        if isinstance(warehouse, cls):
            return warehouse
        return cls(warehouse, catalog, storage_options)

    @classmethod
    def from_config(cls, cfg, warehouse: str | None = None) -> "Warehouse":
        """From a :class:`pipelines.config.Config` (``--warehouse`` overrides its URL)."""
        return cls(warehouse or cfg.warehouse, getattr(cfg, "catalog", None) or None,
                   cfg.storage_options or None)

    def __repr__(self) -> str:
        return f"Warehouse({self.url!r}, catalog={self.properties.get('type', '?')})"

    @property
    def embedded(self) -> bool:
        """True for the default SQLite catalog under the warehouse."""
        return not self.catalog_config

    def exists(self) -> bool:
        """False when the embedded catalog database was never created (nothing to read)."""
        if not self.embedded:
            return True
        return os.path.exists(os.path.join(_local_path(self.url), CATALOG_DB))

    def catalog(self, create: bool = False):
        """The pyiceberg catalog; ``create`` allows making the embedded database."""
        if self._catalog is None:
            if self.embedded:
                if not create and not self.exists():
                    raise TableNotFoundError(f"warehouse {self.url} does not exist (no {CATALOG_DB})")
                os.makedirs(_local_path(self.url), exist_ok=True)
            from pyiceberg.catalog import load_catalog

            try:
                self._catalog = load_catalog(self.name, **self.properties)
            except (ValueError, ImportError, NotImplementedError) as exc:
                raise ConfigError(f"cannot open the Iceberg catalog of {self.url}: {exc}") from None
            except Exception as exc:   # unreachable REST server, bad database URI...
                raise WarehouseError(f"cannot open the Iceberg catalog of {self.url} "
                                     f"({self.properties.get('type', '?')}): "
                                     f"{type(exc).__name__}: {exc}") from None
        return self._catalog

    def list_tables(self) -> list[str]:
        """Display names of every table in every namespace; ``[]`` if nothing exists."""
        if not self.exists():
            return []
        cat = self.catalog()
        out = []
        for ns in cat.list_namespaces():
            out.extend(table_name(ident) for ident in cat.list_tables(ns))
        return sorted(out)

    def load_table(self, name: str):
        """The pyiceberg table ``name``, or ``None`` if it (or the warehouse) does not exist."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        ident = table_identifier(name)
        if not self.exists():
            return None
        try:
            return self.catalog().load_table(ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the catalog has ``namespace`` (False when the warehouse does not exist)."""
        from pyiceberg.exceptions import NoSuchNamespaceError

        if not self.exists():
            return False
        try:
            self.catalog().load_namespace_properties(namespace)
            return True
        except NoSuchNamespaceError:
            return False

    def drop_if_empty(self, name: str) -> bool:
        """Drop table ``name`` and delete its files when it holds no snapshot (a table a
        failed first load created: nobody committed to it). True when dropped."""
        tbl = self.load_table(name)
        if tbl is None or tbl.metadata.snapshots:
            return False
        location = tbl.location()
        self.catalog().drop_table(table_identifier(name))
        fs, path = table_fs(tbl, location)
        if fs.exists(path):
            fs.rm(path, recursive=True)
        return True

    def drop_namespace_if_empty(self, namespace: str) -> None:
        """Drop ``namespace`` when it holds no table (one a failed first load created)."""
        from pyiceberg.exceptions import NamespaceNotEmptyError, NoSuchNamespaceError

        if not self.exists():
            return
        cat = self.catalog()
        try:
            if not cat.list_tables(namespace):
                cat.drop_namespace(namespace)
        except (NamespaceNotEmptyError, NoSuchNamespaceError):
            pass

    def table(self, name: str):
        """Like :meth:`load_table` but a missing table is a :class:`TableNotFoundError`."""
        tbl = self.load_table(name)
        if tbl is None:
            raise TableNotFoundError(f"table {name!r} does not exist in warehouse {self.url}")
        return tbl

    def default_location(self, name: str) -> str:
        """Where the catalog puts table ``name`` when it creates it (no catalog call when
        the namespace is gone too: ``<warehouse>/<namespace>/<name>``)."""
        ns, short = table_identifier(name)
        if self.exists():
            try:
                return default_table_location(self.catalog(), ns, short)
            except Exception:   # noqa: BLE001 - no namespace (an emptied catalog): the default
                pass
        root = str(self.properties.get("warehouse") or self.url).rstrip("/")
        return f"{root}/{ns}/{short}"

    def orphaned_metadata(self, name: str) -> str | None:
        """The newest ``metadata/*.metadata.json`` at ``name``'s default location, when
        the catalog has no table ``name`` (a lost or emptied catalog); else None."""
        if self.load_table(name) is not None:
            return None
        from pyiceberg.io.fsspec import FsspecFileIO

        url = self.default_location(name) + "/metadata"
        scheme = url.split("://", 1)[0] if "://" in url else "file"
        fs = FsspecFileIO(self.properties).get_fs(scheme)
        try:
            found = [p for p in fs.ls(url.split("://", 1)[-1], detail=False)
                     if p.endswith(".metadata.json")]
        except FileNotFoundError:
            return None
        if not found:
            return None
        # NNNNN-<uuid>.metadata.json: the version number orders them.
        newest = max(found, key=lambda p: (_metadata_version(p), p))
        return ("file://" + "/" + newest.lstrip("/")) if scheme == "file" else f"{scheme}://{newest}"

    def check_not_orphaned(self, name: str) -> None:
        """:class:`OrphanedTableError` when the catalog lost table ``name`` but its
        location still holds its metadata (see :meth:`create_table`)."""
        orphan = self.orphaned_metadata(name)
        if orphan is not None:
            raise OrphanedTableError(
                f"table {name!r} is not in the catalog of warehouse {self.url}, but its "
                f"location holds an Iceberg table (newest metadata {orphan}): the catalog "
                f"lost it. Rerun with --register-existing to register it and carry on from "
                f"its committed offsets, or move that location away to start over")

    def recover(self, names: Iterable[str], register_existing: bool = False) -> None:
        """Before a job uses tables ``names``: each one the catalog lost while its
        location holds its metadata is registered again (``register_existing``) or
        refused (:class:`OrphanedTableError`); nothing else changes."""
        for name in names:
            if register_existing and self.orphaned_metadata(name) is not None:
                self.register_existing(name)
            else:
                self.check_not_orphaned(name)

    def register_existing(self, name: str):
        """Register the newest metadata file at ``name``'s location into the catalog
        (``--register-existing``: the table carries on from its committed offsets);
        a :class:`TableNotFoundError` when there is none."""
        meta = self.orphaned_metadata(name)
        if meta is None:
            existing = self.load_table(name)
            if existing is not None:
                return existing
            raise TableNotFoundError(f"--register-existing: no Iceberg metadata at "
                                     f"{self.default_location(name)}/metadata to register")
        ns, short = table_identifier(name)
        cat = self.catalog(create=True)
        cat.create_namespace_if_not_exists(ns)
        log.warning("registering %s from %s", name, meta)
        return cat.register_table((ns, short), meta)

    def create_table(self, name: str, schema, partition_by: Sequence[str] | None = None,
                     properties: Mapping[str, str] | None = None):
        """Create ``name`` (or return it if it exists) with ``schema`` (pyarrow or
        Iceberg) partitioned by ``partition_by`` (see :func:`partition_spec`).
        Refused (:class:`OrphanedTableError`) when the location already holds an
        Iceberg table the catalog lost: a new table there would start from offset 0
        next to the old one's files."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        ns, short = table_identifier(name)
        existing = self.load_table(name)
        if existing is not None:
            return existing
        self.check_not_orphaned(name)
        cat = self.catalog(create=True)
        cat.create_namespace_if_not_exists(ns)
        ice_schema = iceberg_schema(schema)
        spec = partition_spec(ice_schema, partition_by if partition_by is not None
                              else DEFAULT_PARTITION_BY)
        try:
            return cat.create_table((ns, short), schema=ice_schema, partition_spec=spec,
                                    properties={**TABLE_PROPERTIES, **dict(properties or {})})
        except TableAlreadyExistsError:   # a racing job created it first
            return cat.load_table((ns, short))
        except FileNotFoundError:
            missing = missing_bucket(self.properties, self.default_location(name))
            if missing is None:
                raise
            raise missing from None


# ---------------------------------------------------------------------------
# schema and partitioning

def iceberg_schema(schema):
    """An Iceberg schema with fresh field ids from a pyarrow or Iceberg schema."""
    from pyiceberg.schema import assign_fresh_schema_ids

    from .iceberg_internals import convert_schema

    return assign_fresh_schema_ids(convert_schema(schema))


def partition_spec(schema, partition_by: Sequence[str]):
    """The Iceberg partition spec of ``partition_by`` over ``schema`` (Iceberg)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (DayTransform, HourTransform, IdentityTransform,
                                      MonthTransform, YearTransform)

    transforms = {"identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
                  "day": DayTransform, "hour": HourTransform}
    fields = []
    for i, text in enumerate(partition_by):
        kind, column = parse_partition_field(text)
        try:
            source = schema.find_field(column)
        except ValueError:
            raise ConfigError(f"partition field {text!r}: the table has no column {column!r}") from None
        name = column if kind == "identity" else f"{column}_{kind}"
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i,
                                     transform=transforms[kind](), name=name))
    return PartitionSpec(*fields)


# ---------------------------------------------------------------------------
# offsets in snapshots


def snapshot_offsets(snapshot) -> dict[TopicPartition, int] | None:
    """The ``kafkastore.offsets`` map of a snapshot, or None if it carries none."""
    if snapshot is None or snapshot.summary is None:
        return None
    text = snapshot.summary.additional_properties.get(OFFSETS_KEY)
    if text is None:
        return None
    try:
        return offsets_from_json(json.loads(text))
    except ValueError as exc:
        raise WarehouseError(f"snapshot {snapshot.snapshot_id}: bad {OFFSETS_KEY}: {exc}") from None


def _ref_head(table, ref: str):
    if ref == MAIN:
        return table.current_snapshot()
    return table.snapshot_by_name(ref)


def ancestry(table, ref: str = MAIN) -> Iterable:
    """Snapshots of ``ref``'s ancestry, newest first (empty for a table without one)."""
    from pyiceberg.table.snapshots import ancestors_of

    head = _ref_head(table, ref)
    return ancestors_of(head, table.metadata) if head is not None else iter(())


def offsets_snapshot(table, ref: str = MAIN):
    """The newest snapshot in ``ref``'s ancestry carrying kafkastore offsets, or None."""
    for snap in ancestry(table, ref):
        if snapshot_offsets(snap) is not None:
            return snap
    return None


def committed_offsets(table, ref: str = MAIN) -> dict[TopicPartition, int]:
    """``{(topic, partition): next offset}`` committed in ``table`` (``{}`` if none;
    ``table`` may be ``None``, a table that does not exist)."""
    if table is None:
        return {}
    return snapshot_offsets(offsets_snapshot(table, ref)) or {}


def find_run(table, run_id: str, ref: str = MAIN):
    """The snapshot of ``ref``'s ancestry committed by ``run_id``, or None."""
    for snap in ancestry(table, ref):
        if snap.summary is not None and snap.summary.additional_properties.get(RUN_ID_KEY) == run_id:
            return snap
    return None


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot as :func:`history` reports it."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str
    kafkastore_operation: str | None
    run_id: str | None
    offsets: dict[str, dict[str, int]] | None
    ranges: list[dict[str, Any]]
    audit: dict[str, Any] | None
    summary: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "parent_id": self.parent_id,
                "timestamp_ms": self.timestamp_ms, "operation": self.operation,
                "kafkastore_operation": self.kafkastore_operation, "run_id": self.run_id,
                "offsets": self.offsets, "ranges": self.ranges, "audit": self.audit}


def history(table, ref: str = MAIN) -> list[SnapshotInfo]:
    """``ref``'s ancestry, oldest first, with the kafkastore fields decoded."""
    out = []
    for snap in ancestry(table, ref):
        props = dict(snap.summary.additional_properties) if snap.summary is not None else {}
        offsets = snapshot_offsets(snap)
        out.append(SnapshotInfo(
            snapshot_id=snap.snapshot_id, parent_id=snap.parent_snapshot_id,
            timestamp_ms=snap.timestamp_ms,
            operation=str(snap.summary.operation.value) if snap.summary is not None else "",
            kafkastore_operation=props.get(OPERATION_KEY), run_id=props.get(RUN_ID_KEY),
            offsets=None if offsets is None else offsets_to_json(offsets),
            ranges=json.loads(props.get(RANGES_KEY, "[]")),
            audit=json.loads(props[AUDIT_KEY]) if AUDIT_KEY in props else None,
            summary=props))
    return out[::-1]


# ---------------------------------------------------------------------------
# validation (pure)


def next_offsets(committed: Mapping[TopicPartition, int], operation: str,
                 ranges: Sequence[OffsetRange], *, gaps: Sequence[OffsetRange] = (),
                 expected: Mapping[TopicPartition, int] | None = None
                 ) -> dict[TopicPartition, int]:
    """The full offsets map after committing ``ranges`` on top of ``committed``.

    ``load``: a range starts exactly at the committed offset of its partition
    (anywhere for a partition never loaded), unless ``gaps`` holds the skipped
    ``[committed, from)`` (data deleted from the log before it was loaded).
    Below: :class:`OffsetOverlapError`; above: :class:`OffsetGapError`.
    ``reprocess``: a range starts at or below the committed offset (anywhere
    for a partition the table never committed: nothing to replace); ``expected``
    (the offsets the reprocess was planned on) must still be the committed ones
    for its partitions, else :class:`TableChangedError`. Every range ends at or
    after its start.
    """
    if operation not in OPERATIONS:
        raise WarehouseError(f"unknown operation {operation!r}; expected one of {OPERATIONS}")
    indexed = by_partition(ranges)
    gap_map = by_partition(gaps)
    out = dict(committed)
    for tp, r in indexed.items():
        if r.until_offset < r.from_offset:
            raise WarehouseError(f"bad range [{r.from_offset}, {r.until_offset}) of {r.topic}/{r.partition}")
        c = committed.get(tp)
        if operation == "load":
            if c is not None and r.from_offset < c:
                raise OffsetOverlapError(
                    f"{r.topic}/{r.partition}: range [{r.from_offset}, {r.until_offset}) overlaps "
                    f"offsets already committed (next offset {c})")
            if c is not None and r.from_offset > c:
                g = gap_map.get(tp)
                if g is None or (g.from_offset, g.until_offset) != (c, r.from_offset):
                    raise OffsetGapError(
                        f"{r.topic}/{r.partition}: range starts at {r.from_offset} but the table's "
                        f"next offset is {c}: offsets [{c}, {r.from_offset}) would be skipped")
        else:
            if expected is not None and expected.get(tp) != c:
                raise TableChangedError(
                    f"{r.topic}/{r.partition}: the table's next offset moved from "
                    f"{expected.get(tp)} to {c} since the reprocess was planned; rerun it")
            if c is not None and r.from_offset > c:
                raise OffsetGapError(
                    f"{r.topic}/{r.partition}: cannot reprocess from {r.from_offset}: the table's "
                    f"next offset is {c}")
        # A reprocess replaces [from, until) and never moves offsets back: a
        # dead-letter table ahead of its table keeps its end.
        out[tp] = r.until_offset if operation == "load" or c is None else max(c, r.until_offset)
    return out


# ---------------------------------------------------------------------------
# commit


@dataclass(frozen=True)
class KafkaCommit:
    """One kafkastore commit, as data.

    ``files``: full URLs of Parquet files (no field ids; one partition value
    per file) to add. ``delete_from``: for a reprocess, per range the rows
    ``topic = t AND partition = p AND from <= offset < until`` are deleted in the
    same transaction. ``schema``: a pyarrow schema to merge into the table's by
    name first (new optional columns). ``audit``: JSON-able, recorded as
    ``kafkastore.audit``. ``expected``: see :func:`next_offsets`. ``footers``:
    ``{url: (size in bytes, footer)}`` for files whose writer kept their footer
    (see :func:`data_file`); the others' footers are read from the files.
    """

    run_id: str
    operation: str
    ranges: tuple[OffsetRange, ...]
    files: tuple[str, ...] = ()
    gaps: tuple[OffsetRange, ...] = ()
    delete_from: tuple[OffsetRange, ...] = ()
    schema: Any = None
    audit: Mapping[str, Any] | None = None
    expected: Mapping[TopicPartition, int] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    footers: Mapping[str, tuple[int, bytes]] = field(default_factory=dict)
    #: Copy-on-write: ``rewrite(table, head snapshot id) -> (DataFiles to drop,
    #: [(url, bytes, footer)] to add)``, called on every attempt.
    rewrite: Any = None

    def summary(self, offsets: Mapping[TopicPartition, int]) -> dict[str, str]:
        """The snapshot-summary properties of this commit on top of ``offsets``."""
        out = {OFFSETS_KEY: json.dumps(offsets_to_json(offsets), sort_keys=True),
               RUN_ID_KEY: self.run_id, OPERATION_KEY: self.operation,
               RANGES_KEY: json.dumps([r.to_json() for r in self.ranges])}
        if self.gaps:
            out[GAPS_KEY] = json.dumps([g.to_json() for g in self.gaps])
        if self.audit is not None:
            out[AUDIT_KEY] = json.dumps(self.audit, sort_keys=True, default=str)
        out.update({str(k): str(v) for k, v in self.properties.items()})
        return out


@dataclass
class CommitResult:
    """``snapshot_id`` of the run's (last) snapshot; ``noop``: an earlier
    attempt with the same run id had committed; ``attempts``: tries made;
    ``read_back``: the outcome was decided by reading the table back."""

    snapshot_id: int
    noop: bool = False
    attempts: int = 1
    read_back: bool = False
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


def _delete_filter(ranges: Sequence[OffsetRange]):
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan, Or

    expr = None
    for r in ranges:
        term = And(And(EqualTo("topic", r.topic), EqualTo("partition", r.partition)),
                   And(GreaterThanOrEqual("offset", r.from_offset),
                       LessThan("offset", r.until_offset)))
        expr = term if expr is None else Or(expr, term)
    return expr


def _keep_mask(data, ranges: Sequence[OffsetRange]):
    """Rows of ``data`` that survive deleting each range's ``[from, until)``."""
    import pyarrow.compute as pc

    drop = None
    for r in ranges:
        term = pc.and_(pc.and_(pc.equal(data["topic"], r.topic),
                               pc.equal(data["partition"], r.partition)),
                       pc.and_(pc.greater_equal(data["offset"], r.from_offset),
                               pc.less(data["offset"], r.until_offset)))
        drop = term if drop is None else pc.or_(drop, term)
    return pc.invert(pc.fill_null(drop, False))


def _offset_bound(table, data_file, upper: bool = False) -> int | None:
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    try:
        fid = table.schema().find_field("offset").field_id
    except ValueError:
        return None
    raw = ((data_file.upper_bounds if upper else data_file.lower_bounds) or {}).get(fid)
    return None if raw is None else int(from_bytes(LongType(), raw))


def _rewind_files(table, ranges: Sequence[OffsetRange], run_id: str, snapshot_id: int | None):
    """Files of ``snapshot_id`` holding rows to delete: those whose rows all go
    (dropped whole) and the straddling ones, rewritten without those rows
    (copy-on-write; never delete files). Returns (drop DataFiles, new file URLs)."""
    import uuid

    import pyarrow.parquet as pq

    if snapshot_id is None:
        return [], []
    drop, new_urls = [], []
    low = {r.topic_partition: (r.from_offset, r.until_offset) for r in ranges}
    for task in table.scan(snapshot_id=snapshot_id, row_filter=_delete_filter(ranges)).plan_files():
        if task.delete_files:
            raise UnsupportedDeletesError(f"table {_name(table)} has delete files; compact it "
                                          f"before reprocessing")
        df = task.file
        lb = _offset_bound(table, df)
        parts = _single_topic_partition(table, df)
        ub = _offset_bound(table, df, upper=True)
        if (parts is not None and parts in low and lb is not None and ub is not None
                and lb >= low[parts][0] and ub < low[parts][1]):
            drop.append(df)
            continue
        fs, path = table_fs(table, df.file_path)
        try:
            with fs.open(path, "rb") as f:
                data = pq.read_table(f)
        except FileNotFoundError as exc:
            raise missing_file(table, snapshot_id, exc) from None
        kept = data.filter(_keep_mask(data, ranges))
        drop.append(df)
        if kept.num_rows:
            url = f"{table.location()}/data/rewind-{_safe(run_id)}-{uuid.uuid4().hex}.parquet"
            fs2, path2 = table_fs(table, url)
            with fs2.open(path2, "wb") as f:
                pq.write_table(kept, f, compression="zstd")
            new_urls.append(url)
    return drop, new_urls


def missing_file(table, snapshot_id, exc: BaseException) -> MissingDataFileError:
    """The one-line error for a data file of ``snapshot_id`` that is gone."""
    return MissingDataFileError(f"table {_name(table)}: a data file of snapshot {snapshot_id} "
                                f"is missing ({exc}); it was removed outside Iceberg")


def check_rewind_files(table, ranges: Sequence[OffsetRange]) -> None:
    """Refuse (:class:`MissingDataFileError`) when a data file of main's head that a rewind
    of ``ranges`` must read or drop is gone: checked before a reprocess writes or commits
    anything, so one table of a table and its dead letters is never rewound alone."""
    head = table.current_snapshot()
    if head is None or not ranges:
        return
    for task in table.scan(snapshot_id=head.snapshot_id,
                           row_filter=_delete_filter(ranges)).plan_files():
        fs, path = table_fs(table, task.file.file_path)
        if not fs.exists(path):
            raise missing_file(table, head.snapshot_id, FileNotFoundError(
                f"no such file: {task.file.file_path}"))


def _single_topic_partition(table, data_file):
    """(topic, partition) when the file's bounds say it holds exactly one."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, StringType

    schema = table.schema()
    try:
        tid, pid = schema.find_field("topic").field_id, schema.find_field("partition").field_id
    except ValueError:
        return None
    lo, hi = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    if not all(k in lo and k in hi for k in (tid, pid)) or lo[tid] != hi[tid] or lo[pid] != hi[pid]:
        return None
    # string bounds may be truncated: equal truncated bounds do not prove one value
    topic = from_bytes(StringType(), lo[tid])
    if len(lo[tid]) >= 16:
        return None
    return (topic, int(from_bytes(IntegerType(), lo[pid])))


def _name(table) -> str:
    return table_name(table.name())


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:60]


def table_fs(table, url: str):
    """(fsspec filesystem, path) for ``url`` with the table's IO properties."""
    from pyiceberg.io.fsspec import FsspecFileIO

    io = table.io if isinstance(table.io, FsspecFileIO) else FsspecFileIO(table.io.properties)
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    fs = io.get_fs(scheme)
    return fs, url.split("://", 1)[1] if "://" in url else url


def ensure_no_blind_retry(table):
    """Set ``commit.retry.num-retries=0`` on a table that lacks it (created elsewhere)."""
    if table.metadata.properties.get(RETRY_PROPERTY) == "0":
        return table
    with table.transaction() as txn:
        txn.set_properties(**NO_BLIND_RETRY)
    return table.refresh()


def _build(table, c: KafkaCommit, branch: str):
    """Stage ``c`` on a fresh transaction of ``table``; returns (txn, new offsets)."""
    committed = committed_offsets(table, branch)
    if c.operation in CARRY_OPERATIONS:
        if c.ranges:
            raise WarehouseError(f"a {c.operation} commit carries offsets forward; it has no ranges")
        new = dict(committed)
    else:
        new = next_offsets(committed, c.operation, c.ranges, gaps=c.gaps, expected=c.expected)
    props = c.summary(new)
    txn = table.transaction()
    if c.schema is not None:
        from pyiceberg.exceptions import ValidationError

        try:
            with txn.update_schema() as update:
                update.union_by_name(c.schema)
        except (ValueError, TypeError, ValidationError) as exc:
            raise SchemaEvolutionError(f"the new data's schema cannot be merged into table "
                                       f"{_name(table)}: {exc}") from None
    from pyiceberg.table import TableProperties

    from .iceberg_internals import data_files_of

    if txn.table_metadata.name_mapping() is None:
        # Our files carry no field ids; readers map their columns by name.
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                              txn.table_metadata.schema().name_mapping.model_dump_json()})
    drop, rewritten = [], []
    if c.delete_from:
        head = _ref_head(table, branch)
        drop, rewritten = _rewind_files(table, c.delete_from, c.run_id,
                                        head.snapshot_id if head is not None else None)
    footers = dict(c.footers)
    if c.rewrite is not None:
        # Copy-on-write (upsert loads, maintenance): planned against this attempt's
        # table, so a racing commit makes the next attempt plan again.
        head = _ref_head(table, branch)
        more_drop, written = c.rewrite(table, head.snapshot_id if head is not None else None)
        drop = list(drop) + list(more_drop)
        rewritten = rewritten + [u for u, _, _ in written]
        footers.update({u: (size, footer) for u, size, footer in written})
    try:
        files = list(c.files) + rewritten
        unread = [u for u in files if u not in footers]   # e.g. reprocess rewrites
        read = dict(zip(unread, data_files_of(txn.table_metadata, unread, table.io)))
        added = [read[u] if u in read else data_file(txn.table_metadata, u, *footers[u])
                 for u in files]
    except ValueError as exc:
        raise SchemaEvolutionError(f"files of run {c.run_id} do not fit table "
                                   f"{_name(table)}: {exc}") from None
    # One snapshot per commit, even with no files: offsets advance over ranges
    # that held only control records, aborted data or dead letters.
    update = txn.update_snapshot(snapshot_properties=props, branch=branch)
    with (update.overwrite() if drop else update.fast_append()) as producer:
        for df in drop:
            producer.delete_data_file(df)
        for df in added:
            producer.append_data_file(df)
    return txn, new


def data_file(metadata, url: str, size: int, footer: bytes):
    """The Iceberg data file entry of the Parquet file at ``url`` (``size`` bytes) from
    its ``footer`` (a standalone Parquet metadata file, as :func:`pipelines.table_files.write_files`
    keeps it): what pyiceberg's ``parquet_file_to_data_file`` builds after reading the
    footer back from the file, the same checks (ValueError if the schema does not fit)
    and statistics, without the read. Loads write many files and the executors that
    wrote them already had their footers."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (compute_statistics_plan,
                                      data_file_statistics_from_parquet_metadata,
                                      parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    parquet = pq.read_metadata(pa.BufferReader(footer))
    schema = metadata.schema()
    check_schema_compatible(schema, parquet.schema.to_arrow_schema(), metadata.format_version)
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet, stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=url, file_format=FileFormat.PARQUET,
        partition=stats.partition(metadata.spec(), schema), file_size_in_bytes=size,
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None,
        key_metadata=None, **stats.to_serialized_dict())


def commit(table, c: KafkaCommit, *, branch: str = MAIN, max_attempts: int = 20,
           backoff_s: float = 0.05, max_backoff_s: float = 5.0,
           read_back_tries: int = 5, clock: Clock | None = None,
           rng: random.Random | None = None) -> CommitResult:
    """Commit ``c`` to ``table`` exactly once (see the module docstring), on the one
    commit engine (:class:`kafkastore.commit.CommitEngine`).

    Raises the validation errors of :func:`next_offsets` (nothing committed),
    :class:`SchemaEvolutionError`, :class:`kafkastore.errors.CommitGaveUpError` after
    ``max_attempts`` conflicts, :class:`kafkastore.errors.CommitUnknownError` when reading
    back cannot decide (the files stay; rerunning the same run id is safe).
    """
    if c.operation not in OPERATIONS + CARRY_OPERATIONS:
        raise WarehouseError(f"unknown operation {c.operation!r}")
    engine = CommitEngine(backoff=Backoff(backoff_s, max_backoff_s),
                          budget=Budget(max_attempts=max_attempts),
                          unknown_retries=max(1, read_back_tries) - 1, clock=clock, rng=rng)
    return engine.run(_TableTarget(ensure_no_blind_retry(table), c, branch))


class _TableTarget(CommitTarget):
    """One :func:`commit` as the engine sees it: the catalog's atomic swap of the table's
    metadata. A pyiceberg transaction cannot be committed twice, so after an unknown
    outcome read back as absent the engine plans afresh; the run id (looked up first on
    every attempt) recognises a late landing."""

    fatal_errors = (TableChangedError, OffsetGapError, OffsetOverlapError, SchemaEvolutionError,
                    BucketNotFoundError)
    unknown_errors = (Exception,)   # a catalog call that failed otherwise may have been applied
    refused_errors = ()
    reusable = False
    unknown_hint = "; its files are kept; rerun with the same run id"

    def __init__(self, table, c: KafkaCommit, branch: str):
        from pyiceberg.exceptions import CommitFailedException

        self.conflict_errors = (CommitFailedException,)
        self.table, self.c, self.branch = table, c, branch
        self.fresh = True
        self.found = None

    def read(self):
        if not self.fresh:
            self.table = self.table.refresh()
        self.fresh = False
        return self.table

    def plan(self, table, attempt: int):
        done = find_run(table, self.c.run_id, self.branch)
        if done is not None:
            return Done(CommitResult(done.snapshot_id, noop=True, attempts=attempt,
                                     offsets=snapshot_offsets(done) or {}))
        try:
            txn, new = _build(table, self.c, self.branch)   # re-validates the offsets every attempt
        except FileNotFoundError:
            self._raise_if_no_bucket()
            raise
        return txn, new

    def _raise_if_no_bucket(self) -> None:
        """Writing the manifests failed with "not found" before the catalog swap: with
        the bucket gone that is a definite failure, not an unknown outcome to read back."""
        missing = missing_bucket(self.table.io.properties, self.table.location())
        if missing is not None:
            raise missing from None

    def put(self, planned) -> None:
        try:
            self.table = planned[0].commit_transaction()
        except FileNotFoundError:
            self._raise_if_no_bucket()
            raise

    def read_back(self, planned) -> bool | None:
        self.table = self.table.refresh()
        self.found = find_run(self.table, self.c.run_id, self.branch)
        return True if self.found is not None else None

    def result(self, planned, *, attempts: int, read_back: bool) -> CommitResult:
        if read_back:
            return CommitResult(self.found.snapshot_id, attempts=attempts, read_back=True,
                                offsets=snapshot_offsets(self.found) or {})
        snap = find_run(self.table, self.c.run_id, self.branch)
        if snap is None:   # pragma: no cover - a catalog that acknowledged and lost the commit
            raise CommitUnknownError(f"commit of run {self.c.run_id} acknowledged but not in "
                                     f"{self.branch}")
        return CommitResult(snap.snapshot_id, attempts=attempts, offsets=planned[1])

    def describe(self, planned) -> str:
        return f"commit of run {self.c.run_id}"


# ---------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class ScanPlan:
    """The data files of one snapshot (``snapshot_id`` None: the table is empty)."""

    table: str
    snapshot_id: int | None
    files: tuple[str, ...]
    delete_files: tuple[str, ...]
    records: int

    def urls(self) -> list[str]:
        """The data files as fsspec URLs, for engines that read Parquet by path.
        A snapshot with delete files is refused: reading its data files alone
        would show deleted rows."""
        if self.delete_files:
            raise UnsupportedDeletesError(
                f"table {self.table} snapshot {self.snapshot_id} has {len(self.delete_files)} "
                f"delete file(s); read it through pyiceberg (read_arrow) or compact it first")
        return list(self.files)


def resolve_snapshot(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
                     ref: str | None = None):
    """The snapshot to read: by id, the newest at or before ``as_of_ms``, a branch or
    tag name, else main's head. None for a table without snapshots."""
    given = [x is not None for x in (snapshot_id, as_of_ms, ref)]
    if sum(given) > 1:
        raise ConfigError("give at most one of snapshot id, timestamp and ref")
    if snapshot_id is not None:
        snap = table.snapshot_by_id(int(snapshot_id))
        if snap is None:
            raise TableNotFoundError(f"table {_name(table)} has no snapshot {snapshot_id}")
        return snap
    if as_of_ms is not None:
        snap = snapshot_as_of(table, int(as_of_ms))
        if snap is None:
            raise TableNotFoundError(f"table {_name(table)} has no snapshot at or before "
                                     f"{int(as_of_ms)} ms")
        return snap
    if ref is not None:
        snap = table.snapshot_by_name(ref)
        if snap is None:
            raise TableNotFoundError(f"table {_name(table)} has no branch or tag {ref!r}")
        return snap
    return table.current_snapshot()


def snapshot_as_of(table, timestamp_ms: int):
    """Main's snapshot at ``timestamp_ms`` (the newest in the snapshot log at or before
    it), None when the table had none then; :class:`ExpiredSnapshotError` when the one
    it had then was expired (pyiceberg alone answers with an older snapshot or None).

    Expiry removes snapshots from the snapshot log, so the log alone cannot tell "no
    snapshot yet" from "expired". The metadata log can: the newest previous metadata
    file written at or before the time names the snapshot current then, and lists it
    with its commit time. When the metadata log does not reach back that far, the parent
    links decide conservatively: a surviving snapshot whose parent is gone means
    snapshots were expired before it, and a time before it is refused."""
    snap = table.snapshot_as_of_timestamp(timestamp_ms)
    lost = _expired_then(table, timestamp_ms, snap)
    if lost is None:
        return snap
    log = table.metadata.snapshot_log
    oldest = table.snapshot_by_id(log[0].snapshot_id) if log else table.current_snapshot()
    from .iceberg_read import iso

    since = (f"the oldest snapshot still available is {oldest.snapshot_id} at "
             f"{iso(oldest.timestamp_ms)}" if oldest is not None else "no snapshot is left")
    raise ExpiredSnapshotError(
        f"table {_name(table)}: the snapshot current at {iso(timestamp_ms)} "
        f"({timestamp_ms} ms){lost} was expired (kafkastore vacuum); {since}")


def _expired_then(table, timestamp_ms: int, found) -> str | None:
    """None when ``found`` (pyiceberg's answer) is right, else a note on the expired
    snapshot that was current at ``timestamp_ms`` ("" when its id is unknown)."""
    meta = table.metadata
    older = [e for e in meta.metadata_log if e.timestamp_ms <= timestamp_ms]
    if older:
        from pyiceberg.serializers import FromInputFile

        newest = max(older, key=lambda e: e.timestamp_ms)
        try:
            then = FromInputFile.table_metadata(table.io.new_input(newest.metadata_file))
        except FileNotFoundError:
            then = None
        if then is not None:
            sid = then.current_snapshot_id
            old = then.snapshot_by_id(sid) if sid is not None else None
            if old is None or table.snapshot_by_id(sid) is not None:
                return None
            if found is not None and found.timestamp_ms >= old.timestamp_ms:
                return None      # committed after that metadata file, still at or before the time
            return f" (snapshot {sid}, committed {old.timestamp_ms} ms)"
    # The metadata log does not reach back: judge from the parent links of the snapshot log.
    log = meta.snapshot_log
    ids = [e.snapshot_id for e in log]
    if found is None:
        first = table.snapshot_by_id(ids[0]) if ids else None
        return "" if first is not None and first.parent_snapshot_id is not None else None
    i = ids.index(found.snapshot_id) if found.snapshot_id in ids else len(ids) - 1
    if i + 1 < len(ids):
        nxt = table.snapshot_by_id(ids[i + 1])
        if nxt is not None and nxt.parent_snapshot_id not in (None, found.snapshot_id) \
                and table.snapshot_by_id(nxt.parent_snapshot_id) is None:
            return ""            # a snapshot committed between the two was expired
    return None


def plan_scan(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
              ref: str | None = None, row_filter=None) -> ScanPlan:
    """The data and delete files pyiceberg plans for one snapshot."""
    snap = resolve_snapshot(table, snapshot_id=snapshot_id, as_of_ms=as_of_ms, ref=ref)
    name = _name(table)
    if snap is None:
        return ScanPlan(name, None, (), (), 0)
    kwargs = {"snapshot_id": snap.snapshot_id}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    tasks = list(table.scan(**kwargs).plan_files())
    deletes = sorted({d.file_path for t in tasks for d in t.delete_files})
    return ScanPlan(name, snap.snapshot_id, tuple(t.file.file_path for t in tasks),
                    tuple(deletes), sum(t.file.record_count for t in tasks))


def read_arrow(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
               ref: str | None = None, row_filter=None, columns: Sequence[str] | None = None):
    """One snapshot as a pyarrow Table through pyiceberg (positional deletes
    applied; what pyiceberg cannot apply is refused, never ignored)."""
    import pyarrow as pa

    snap = resolve_snapshot(table, snapshot_id=snapshot_id, as_of_ms=as_of_ms, ref=ref)
    if snap is None:
        schema = table.schema().as_arrow()
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        return schema.empty_table()
    kwargs: dict[str, Any] = {"snapshot_id": snap.snapshot_id}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    if columns is not None:
        kwargs["selected_fields"] = tuple(columns)
    try:
        return table.scan(**kwargs).to_arrow()
    except FileNotFoundError as exc:
        raise missing_file(table, snap.snapshot_id, exc) from None
    except NotImplementedError as exc:
        raise UnsupportedDeletesError(f"table {_name(table)} snapshot "
                                      f"{snap.snapshot_id}: {exc}") from None
