"""Opening a warehouse: its Iceberg catalog, its tables and how new tables are made.

:class:`Warehouse` holds the warehouse URL, the ``catalog:`` section of the config
(pyiceberg catalog properties: ``type``, ``uri``, ...) and the fsspec
``storage_options``. Without a ``catalog:`` section a ``file://`` warehouse gets the
embedded catalog, a SQL catalog on SQLite at ``<warehouse>/catalog.db`` with the
warehouse as its root; any other warehouse without a catalog is a :class:`ConfigError`.
``--table NAME`` means ``default.NAME``; ``ns.NAME`` is accepted (:func:`table_identifier`).
Read-only uses (:meth:`Warehouse.load_table`, :meth:`Warehouse.list_tables`,
:func:`pipelines.warehouse.offsets.committed_offsets`) create nothing: on an embedded
warehouse that does not exist yet they return ``None`` / ``[]``. Only
:meth:`Warehouse.create_table` creates the catalog database, the namespace and the table
(with :data:`~.properties.TABLE_PROPERTIES`, :func:`iceberg_schema` and the table's
layout as :func:`pipelines.warehouse.files.iceberg_layout` declares it). Files are read and written through pyiceberg's fsspec FileIO
(:func:`table_fs`); ``storage_options`` of s3fs (``key``, ``secret``,
``client_kwargs.endpoint_url``...) are mapped to pyiceberg's ``s3.*`` properties (a
``catalog:`` section's own ``s3.*`` wins).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Iterable, Mapping

from kafkastore.errors import (BucketNotFoundError, ConfigError, OrphanedTableError,
                               TableNotFoundError, WarehouseError)

from ..spec.table_layout import TableLayout, table_identifier, table_name
# The partition spec's home is the files module (with the rest of how a layout is declared);
# the name stays importable from here.
from .files import iceberg_layout, partition_spec  # noqa: F401
from .iceberg_internals import convert_schema, default_table_location
from .properties import TABLE_PROPERTIES

log = logging.getLogger(__name__)

CATALOG_DB = "catalog.db"
FSSPEC_IO = "pyiceberg.io.fsspec.FsspecFileIO"


# ---------------------------------------------------------------------------
# names and catalogs


def missing_bucket(properties: Mapping[str, Any], url: str):
    """A :class:`~kafkastore.errors.BucketNotFoundError` when ``url``'s bucket does not
    exist (object stores; checked after a "not found", which is all a missing bucket
    answers), else None (also when the check itself fails)."""
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
        """From a :class:`pipelines.spec.job_config.Config` (``--warehouse`` overrides its URL)."""
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

    def create_table(self, name: str, schema, layout: TableLayout | None = None,
                     properties: Mapping[str, str] | None = None):
        """Create ``name`` (or return it if it exists) with ``schema`` (pyarrow or
        Iceberg), declaring its ``layout`` (default: :class:`TableLayout`'s, partitioned
        by day of ``timestamp``) to Iceberg (:func:`pipelines.warehouse.files.iceberg_layout`:
        the partition spec).
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
        declared = iceberg_layout(ice_schema, layout if layout is not None else TableLayout())
        try:
            return cat.create_table((ns, short), schema=ice_schema, **declared,
                                    properties={**TABLE_PROPERTIES, **dict(properties or {})})
        except TableAlreadyExistsError:   # a racing job created it first
            return cat.load_table((ns, short))
        except FileNotFoundError:
            missing = missing_bucket(self.properties, self.default_location(name))
            if missing is None:
                raise
            raise missing from None


# ---------------------------------------------------------------------------
# schema

def iceberg_schema(schema):
    """An Iceberg schema with fresh field ids from a pyarrow or Iceberg schema."""
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(convert_schema(schema))


# ---------------------------------------------------------------------------
# a table's names and files


def name_of(table) -> str:
    """A table's display name (``NAME`` in the default namespace, else ``ns.NAME``)."""
    return table_name(table.name())


def table_fs(table, url: str):
    """(fsspec filesystem, path) for ``url`` with the table's IO properties."""
    from pyiceberg.io.fsspec import FsspecFileIO

    io = table.io if isinstance(table.io, FsspecFileIO) else FsspecFileIO(table.io.properties)
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    fs = io.get_fs(scheme)
    return fs, url.split("://", 1)[1] if "://" in url else url
