"""Upsert tables: a keyed topic loaded as a table of its latest state.

An upsert table keeps one row per key: the Kafka ``key`` column by default, or
``key_columns`` of the decoded value. Which record of a key wins:

* within one Kafka partition, the higher offset (whatever the timestamps say);
* between partitions (keys that moved: a repartitioned topic), the record with
  the later record timestamp, ties broken by the higher partition, then offset.

A tombstone (null value) that wins deletes the key. A tombstone is not kept once
applied: a record of *another* partition with an older timestamp, loaded by a
later run, brings the key back. With timestamps from one clock this cannot
happen, since every load reads all partitions to the same point. Records with a
null key (or a null key column) cannot be upserted and are skipped (counted).

**Write strategy: copy-on-write.** A load never writes delete files. The
executors decode the run's records into staging Parquet files (never
committed); the driver reduces them to one winner per key (:func:`reduce_batch`),
then at every commit attempt (:class:`UpsertRewrite`, called by
:func:`pipelines.warehouse.commit.commit` against the freshly reloaded table) finds the data
files whose key bounds may hold a changed key (:func:`touched_tasks`: file-level
lower/upper bounds of the first key column, bisected against the sorted changed
keys), reads them through pyiceberg (positional deletes applied), drops the rows
the batch beats (:func:`merge`) and writes the survivors together with the new
rows, sorted by key and cut into files of ``target_rows``, so that files cover
disjoint key ranges and later loads touch few of them. The files dropped and the
files written go into the same single snapshot that carries the offsets, so a
crash at any point leaves either the old state with the old offsets or the new
state with the new ones.
"""
from __future__ import annotations

import bisect
import datetime as _dt
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kafkastore.errors import ConfigError, UnsupportedDeletesError, WarehouseError

# The table modes moved to the job specs; their names stay importable from here.
from ..source.schema import nullable
from ..spec.table_layout import (DEFAULT_KEY_COLUMNS, KEY_COLUMNS_PROPERTY, MODE_PROPERTY,  # noqa: F401
                                TOMBSTONE, check_mode, mode_properties, table_mode)

DEFAULT_TARGET_ROWS = 250_000
_ORDER = ("partition", "offset", "timestamp")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


# ---------------------------------------------------------------------------
# pure merge logic


def _keys_from_kafka_key(tbl, key_columns: Sequence[str]):
    """Tombstones of a load keyed by value columns carry no value: take the key
    columns from the Kafka key, a JSON object (Debezium's key shape, with or without
    the schema/payload wrapper). Rows whose key does not parse keep null keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if tuple(key_columns) == DEFAULT_KEY_COLUMNS or TOMBSTONE not in tbl.column_names \
            or "key" not in tbl.column_names:
        return tbl
    dead = tbl.column(TOMBSTONE).to_numpy(zero_copy_only=False)
    if not dead.any():
        return tbl
    raw = tbl.column("key").to_pylist()
    docs = {int(i): _json_key(raw[i]) for i in dead.nonzero()[0]}
    for c in key_columns:
        col = tbl.column(c)
        # Only the tombstones' keys come from JSON (a date as text, a decimal as a
        # number...): cast them alone to the column's type, so they never mix with the
        # column's own values, whatever its type.
        from_key = [None] * len(col)
        for i, doc in docs.items():
            if doc is not None:
                from_key[i] = doc.get(c)
        arr = pc.if_else(pc.is_valid(col), col, _cast_json_values(from_key, col.type))
        tbl = tbl.set_column(tbl.column_names.index(c), tbl.schema.field(c), arr)
    return tbl


def _cast_json_values(values: list, typ):
    """JSON values as an Arrow array of ``typ``; a value that does not convert is null
    (its tombstone then has no key and is skipped, as a key that does not parse)."""
    import pyarrow as pa

    errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
              ValueError, OverflowError)
    try:
        return pa.array(values).cast(typ)
    except errors:
        out = []
        for v in values:
            try:
                out.append(pa.array([v]).cast(typ))
            except errors:
                out.append(pa.nulls(1, typ))
        return pa.concat_arrays(out) if out else pa.array([], typ)


def _json_key(raw) -> dict | None:
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        doc = doc["payload"]
    return doc if isinstance(doc, dict) else None


def keyed_rows(tbl, key_columns: Sequence[str]):
    """(rows with a full key, number of rows skipped for a null key)."""
    import pyarrow.compute as pc

    missing = [c for c in key_columns if c not in tbl.column_names]
    if missing:
        raise ConfigError(f"key column(s) {missing} are not columns of the decoded records "
                          f"(columns: {sorted(c for c in tbl.column_names if not c.startswith('__'))})")
    tbl = _keys_from_kafka_key(tbl, key_columns)
    if not any(tbl.column(c).null_count for c in key_columns):
        return tbl, 0                      # the usual case: no copy
    ok = None
    for c in key_columns:
        v = pc.is_valid(tbl.column(c))
        ok = v if ok is None else pc.and_(ok, v)
    kept = tbl.filter(ok)
    return kept, tbl.num_rows - kept.num_rows


def _with_row(tbl, name: str):
    import numpy as np
    import pyarrow as pa

    return tbl.append_column(name, pa.array(np.arange(tbl.num_rows, dtype=np.int64)))


def _ts_int(col):
    """Timestamps as int64 microseconds (null: the smallest value)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
    return pc.fill_null(col, np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)


def key_ids(tbl, key_columns: Sequence[str]):
    """One int64 per row, equal iff the rows' key columns are equal (non-null keys)."""
    import numpy as np
    import pyarrow.compute as pc

    ids = None
    for c in key_columns:
        enc = pc.dictionary_encode(tbl.column(c).combine_chunks())
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        ids = codes if ids is None else ids * len(enc.dictionary) + codes
    return ids


def _last_of_runs(sorted_ids):
    """Positions of the last element of each run of equal values."""
    import numpy as np

    if len(sorted_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.append(sorted_ids[1:] != sorted_ids[:-1], True))


def reduce_batch(tbl, key_columns: Sequence[str]):
    """One winner per key among ``tbl``'s rows (the module docstring's rule); rows
    keep every column, tombstones included (``TOMBSTONE`` true). Rows need
    non-null key columns (see :func:`keyed_rows`) and ``partition``, ``offset``,
    ``timestamp``. Sorts of integer columns (numpy), no joins: a million rows in a
    fraction of a second."""
    import numpy as np
    import pyarrow as pa

    if tbl.num_rows == 0:
        return tbl
    ids = key_ids(tbl, key_columns)
    part = tbl.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    off = tbl.column("offset").to_numpy(zero_copy_only=False)
    ts = _ts_int(tbl.column("timestamp"))
    # 1. per (key, partition): the highest offset.
    order = np.lexsort((off, part, ids))
    pair = ids[order] * (int(part.max()) + 1 if len(part) else 1) + part[order]
    cand = order[_last_of_runs(pair)]
    # 2. per key, across partitions: the latest (timestamp, partition, offset).
    order2 = cand[np.lexsort((off[cand], part[cand], ts[cand], ids[cand]))]
    best = order2[_last_of_runs(ids[order2])]
    return tbl.take(pa.array(np.sort(best)))


def last_per_partition(tbl, key_columns: Sequence[str]):
    """The rows of ``tbl`` that may still win: per (key, Kafka partition) the highest
    offset (always safe to apply early: the rule's first step). Rows with a null key
    column are all kept (the driver may take their key from the Kafka key)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = [c for c in key_columns if c not in tbl.column_names]
    if tbl.num_rows == 0 or missing:
        return tbl
    ok = None
    for c in key_columns:
        v = pc.is_valid(tbl.column(c))
        ok = v if ok is None else pc.and_(ok, v)
    ok_np = ok.to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(ok_np)
    if len(rows) == 0:
        return tbl
    keyed = tbl.take(pa.array(rows)) if len(rows) < tbl.num_rows else tbl
    ids = key_ids(keyed, key_columns)
    part = keyed.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    off = keyed.column("offset").to_numpy(zero_copy_only=False)
    order = np.lexsort((off, part, ids))
    pair = ids[order] * (int(part.max()) + 1) + part[order]
    keep = np.sort(rows[order[_last_of_runs(pair)]])
    if len(rows) < tbl.num_rows:
        keep = np.sort(np.concatenate([keep, np.flatnonzero(~ok_np)]))
    return tbl.take(pa.array(keep))


def beats(new: tuple[int, int, int], old: tuple[int, int, int]) -> bool:
    """Whether record ``new`` (partition, offset, timestamp µs) replaces ``old`` of the
    same key: same partition by offset, else by (timestamp, partition, offset)."""
    if new[0] == old[0]:
        return new[1] > old[1]
    return (new[2], new[0], new[1]) > (old[2], old[0], old[1])


def merge(existing, winners, key_columns: Sequence[str]):
    """Which rows survive: ``(keep existing: bool array, insert winners: bool array)``.

    ``existing``: the table rows that may share a key with ``winners`` (the
    reduced batch). An existing row goes when a winner of its key beats it; a
    winner is inserted when it beats every existing row of its key and is not a
    tombstone."""
    import numpy as np
    import pyarrow as pa

    keys = list(key_columns)
    keep = np.ones(existing.num_rows, dtype=bool)
    insert = np.ones(winners.num_rows, dtype=bool)
    if TOMBSTONE in winners.column_names:
        insert &= ~winners.column(TOMBSTONE).fill_null(False).to_numpy(zero_copy_only=False)
    if existing.num_rows == 0 or winners.num_rows == 0:
        return keep, insert
    w = _with_row(winners.select(keys), "__w")
    # pyiceberg reads binary/string as large_*: join on the batch's types
    e = existing.select(keys).cast(pa.schema([w.schema.field(k) for k in keys]))
    e = _with_row(e, "__e")
    pairs = e.join(w, keys, join_type="inner", use_threads=False)
    if pairs.num_rows == 0:
        return keep, insert
    ei = pairs.column("__e").to_numpy()
    wi = pairs.column("__w").to_numpy()
    ep = existing.column("partition").to_numpy(zero_copy_only=False)[ei]
    eo = existing.column("offset").to_numpy(zero_copy_only=False)[ei]
    et = _ts_int(existing.column("timestamp"))[ei]
    wp = winners.column("partition").to_numpy(zero_copy_only=False)[wi]
    wo = winners.column("offset").to_numpy(zero_copy_only=False)[wi]
    wt = _ts_int(winners.column("timestamp"))[wi]
    same = ep == wp
    later = np.where(same, wo > eo,
                     (wt > et) | ((wt == et) & ((wp > ep) | ((wp == ep) & (wo > eo)))))
    keep[ei[later]] = False
    insert[wi[~later]] = False
    return keep, insert


def apply_model(state: dict, records: Sequence[Mapping[str, Any]]) -> dict:
    """The reference model (tests, docs): ``state`` maps key -> record dict with
    ``partition``, ``offset``, ``timestamp``, ``value`` (None: tombstone); records are
    applied one at a time by :func:`beats`; tombstones that win delete the key."""
    out = dict(state)
    gone: dict = {}
    for rec in records:
        k = rec["key"]
        cur = out.get(k, gone.get(k))
        new = (rec["partition"], rec["offset"], rec["timestamp"])
        if cur is not None and not beats(new, (cur["partition"], cur["offset"], cur["timestamp"])):
            continue
        if rec["value"] is None:
            out.pop(k, None)
            gone[k] = rec
        else:
            out[k] = rec
            gone.pop(k, None)
    return out


# ---------------------------------------------------------------------------
# files


def _key_field(table, column: str):
    try:
        return table.schema().find_field(column)
    except ValueError:
        return None


_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _comparable(value):
    """One value of a key column in the domain Iceberg stores its bounds in, so keys read by
    pyarrow and bounds decoded by pyiceberg compare: dates as days, times and timestamps as
    microseconds, UUIDs as their 16 bytes; everything else as it is."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, _dt.date):
        return (value - _EPOCH_DATE).days
    if isinstance(value, _dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def touched_tasks(table, snapshot_id: int | None, sorted_keys: Sequence, key_column: str):
    """The scan tasks of ``snapshot_id`` whose ``key_column`` bounds may hold one of
    ``sorted_keys`` (ascending Python values of the first key column). Files without
    bounds count as touched."""
    from pyiceberg.conversions import from_bytes

    if snapshot_id is None or not sorted_keys:
        return []
    sorted_keys = sorted(_comparable(k) for k in sorted_keys)
    fld = _key_field(table, key_column)
    out = []
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        lo = (task.file.lower_bounds or {}).get(fld.field_id) if fld is not None else None
        hi = (task.file.upper_bounds or {}).get(fld.field_id) if fld is not None else None
        if lo is None or hi is None:
            out.append(task)
            continue
        lo_v = _comparable(from_bytes(fld.field_type, lo))
        hi_v = _comparable(from_bytes(fld.field_type, hi))
        i = bisect.bisect_left(sorted_keys, lo_v)
        if i < len(sorted_keys) and sorted_keys[i] <= hi_v:
            out.append(task)
    return out


def read_tasks(table, tasks):
    """The rows of ``tasks`` through pyiceberg (positional deletes applied; equality
    deletes refused), in the table's current schema."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if not tasks:
        return table.schema().as_arrow().empty_table()
    try:
        return ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
    except NotImplementedError as exc:
        raise UnsupportedDeletesError(f"table {'.'.join(table.name())}: {exc}") from None


def write_sorted(location: str, data, key_columns: Sequence[str], *, run_id: str,
                 partition_by: Sequence[str], target_rows: int, io_fs,
                 prefix: str = "upsert") -> list[tuple[str, int, bytes]]:
    """Write ``data`` under ``location``/data sorted by key, one table-partition value
    per file, at most ``target_rows`` rows each; returns (url, bytes, footer) per file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    # lazy: pyarrow start-up (executors)
    from ..warehouse.files import micros_timestamps, partition_keys, partition_label

    if data.num_rows == 0:
        return []
    data = micros_timestamps(data)
    sort = [(c, "ascending") for c in key_columns]
    groups: list[tuple[str, Any]] = []
    if partition_by:
        keys = partition_keys(data, partition_by)
        names = [f"__p{i}" for i in range(len(keys))]
        keyed = data
        for n, k in zip(names, keys):
            keyed = keyed.append_column(n, k)
        keyed = _with_row(keyed, "__row")
        g = keyed.group_by(names, use_threads=False).aggregate([("__row", "list")])
        for vals in g.to_pylist():
            rows = np.sort(np.asarray(vals["__row_list"], dtype=np.int64))
            label = "/".join(partition_label(t, vals[n]) for t, n in zip(partition_by, names))
            groups.append((label, data.take(pa.array(rows))))
    else:
        groups.append(("", data))
    out = []
    fs, root = io_fs
    for label, part in groups:
        part = part.sort_by(sort)
        for start in range(0, part.num_rows, max(1, target_rows)):
            chunk = part.slice(start, target_rows)
            rel = "/".join(x for x in ("data", label, f"{prefix}-{_SAFE.sub('_', run_id)[:40]}-"
                                       f"{uuid.uuid4().hex[:16]}.parquet") if x)
            buf = pa.BufferOutputStream()
            written: list = []
            pq.write_table(chunk, buf, compression="zstd", metadata_collector=written)
            body = buf.getvalue()
            footer = pa.BufferOutputStream()
            written[0].write_metadata_file(footer)
            path = f"{root}/{rel}"
            protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
            if "file" in protocols or "local" in protocols:
                fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            fs.pipe_file(path, body.to_pybytes())
            out.append((f"{location.rstrip('/')}/{rel}", body.size,
                        footer.getvalue().to_pybytes()))
    return out


def _sorted_python_keys(winners, column: str) -> list:
    vals = winners.column(column).to_pylist()
    return sorted(v for v in vals if v is not None)


def _union(tables):
    import pyarrow as pa

    tables = [t for t in tables if t is not None]
    return pa.concat_tables(tables, promote_options="permissive")


@dataclass
class RewriteStats:
    """What the last :class:`UpsertRewrite` attempt did (for summaries and benches)."""

    files_touched: int = 0
    rows_read: int = 0
    rows_dropped: int = 0
    rows_inserted: int = 0
    files_written: int = 0


@dataclass
class UpsertRewrite:
    """The copy-on-write part of an upsert commit, planned afresh on every attempt
    against the table :func:`pipelines.warehouse.commit.commit` just reloaded (a racing load or
    maintenance changes which files hold the keys)."""

    winners: Any                      # pyarrow Table from reduce_batch
    key_columns: tuple[str, ...]
    partition_by: tuple[str, ...]
    run_id: str
    target_rows: int = DEFAULT_TARGET_ROWS
    stats: RewriteStats = field(default_factory=RewriteStats)
    skipped: int = 0                  # staged rows without a full key

    def __call__(self, table, snapshot_id: int | None):
        """(data files to drop, [(url, bytes, footer)] to add)."""
        from ..warehouse.catalog import table_fs  # lazy: pyiceberg start-up

        keys = _sorted_python_keys(self.winners, self.key_columns[0])
        tasks = touched_tasks(table, snapshot_id, keys, self.key_columns[0])
        for t in tasks:
            if any(d.content != 1 for d in t.delete_files):   # 1: position deletes
                raise UnsupportedDeletesError(
                    f"table {'.'.join(table.name())} has equality delete files; "
                    f"run kafkastore maintain (or the writing engine's compaction) first")
        existing = read_tasks(table, tasks)
        keep, insert = merge(existing, self.winners, self.key_columns)
        import pyarrow as pa

        new_rows = self.winners.filter(pa.array(insert))
        if TOMBSTONE in new_rows.column_names:
            new_rows = new_rows.drop_columns([TOMBSTONE])
        kept = existing.filter(pa.array(keep))
        out = _union([kept, new_rows]) if new_rows.num_rows or kept.num_rows else kept
        written = write_sorted(table.location(), out, self.key_columns, run_id=self.run_id,
                               partition_by=self.partition_by, target_rows=self.target_rows,
                               io_fs=table_fs(table, table.location()))
        drop = [t.file for t in tasks]
        self.stats = RewriteStats(len(tasks), existing.num_rows, int((~keep).sum()),
                                  new_rows.num_rows, len(written))
        return drop, written


def staged_rows(urls: Sequence[str], storage_options: Mapping[str, Any] | None):
    """The staging files of an upsert run, as one pyarrow Table."""
    import fsspec
    import pyarrow.parquet as pq

    if not urls:
        return None
    tables = []
    for u in urls:
        with fsspec.open(u, "rb", **dict(storage_options or {})) as f:
            tables.append(pq.read_table(f))
    return _union(tables)


def remove_staging(urls: Sequence[str], storage_options: Mapping[str, Any] | None) -> None:
    """Best-effort removal of a committed run's staging files (vacuum removes what
    this misses: nothing references them)."""
    import fsspec

    for u in urls:
        try:
            fs, path = fsspec.core.url_to_fs(u, **dict(storage_options or {}))
            fs.rm(path)
        except Exception:   # noqa: BLE001 - unreferenced: vacuum removes it later
            pass


def check_staged(tbl) -> None:
    """Staged rows must carry the ordering columns."""
    missing = [c for c in _ORDER if c not in tbl.column_names]
    if missing:
        raise WarehouseError(f"staged upsert rows lack column(s) {missing}")


def upsert_commit(run_id: str, spec, ranges, gaps, staged_urls: Sequence[str],
                  storage_options: Mapping[str, Any] | None, *,
                  target_rows: int = DEFAULT_TARGET_ROWS, extras=None):
    """The :class:`pipelines.warehouse.commit.KafkaCommit` of an upsert load: the run's ranges and
    offsets exactly as an append load's, with :class:`UpsertRewrite` writing the data.
    ``extras``: a registry load's :class:`pipelines.jobs.registry_load.CommitExtras` (the
    evolved schema and the ``kafkastore.schema-ids`` summary), carried by the same commit."""
    return rows_commit(run_id, spec.upsert_keys, spec.layout.partition_by, ranges, gaps,
                       staged_rows(staged_urls, storage_options), target_rows=target_rows,
                       extras=extras)


def rows_commit(run_id: str, key_columns: Sequence[str], partition_by: Sequence[str],
                ranges, gaps, staged, *, target_rows: int = DEFAULT_TARGET_ROWS,
                operation: str = "load", extras=None, **extra):
    """The commit of ``staged`` rows (a pyarrow Table with the ordering columns, the key
    columns and optionally ``TOMBSTONE``; None: no rows) over ``ranges``. ``extras``
    (registry loads): its schema is merged into the table's and its properties go into
    the snapshot summary, in this one commit."""
    from ..warehouse.commit import KafkaCommit  # lazy: pyiceberg start-up

    keys = tuple(key_columns)
    if staged is None or staged.num_rows == 0:
        import pyarrow as pa

        empty = pa.table({c: pa.array([], pa.int64()) for c in _ORDER})
        rewrite: UpsertRewrite = _EmptyRewrite(empty, keys, tuple(partition_by), run_id,
                                               target_rows)
        schema = None
    else:
        check_staged(staged)
        rows, skipped = keyed_rows(staged, keys)
        winners = reduce_batch(rows, keys)
        schema = nullable(staged.drop_columns([TOMBSTONE]).schema
                          if TOMBSTONE in staged.column_names else staged.schema)
        rewrite = UpsertRewrite(winners, keys, tuple(partition_by), run_id, target_rows,
                                skipped=skipped)
    if extras is not None:
        import pyarrow as pa

        # The registry's schema is read from the staging files' footers: drop the
        # staging-only tombstone flag before it reaches the table.
        schema = nullable(pa.schema([f for f in extras.schema if f.name != TOMBSTONE]))
        extra = {**extra, "properties": {**extra.get("properties", {}), **extras.properties}}
    return KafkaCommit(run_id, operation, tuple(ranges), (), gaps=tuple(gaps), schema=schema,
                       rewrite=rewrite, **extra)


class _EmptyRewrite(UpsertRewrite):
    """A run whose ranges held no records (control records, dead letters only): the
    offsets advance, the data stays."""

    def __call__(self, table, snapshot_id):
        return [], []


@dataclass
class RebuildRewrite:
    """A reprocess of an upsert table: every data file of the head is replaced by
    ``state`` (the rebuilt table). The commit's ``expected`` offsets make a load that
    landed meanwhile a refusal; maintenance meanwhile only re-plans."""

    state: Any
    key_columns: tuple[str, ...]
    partition_by: tuple[str, ...]
    run_id: str
    target_rows: int = DEFAULT_TARGET_ROWS
    stats: RewriteStats = field(default_factory=RewriteStats)

    def __call__(self, table, snapshot_id: int | None):
        from ..warehouse.catalog import table_fs  # lazy: pyiceberg start-up

        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files()) if snapshot_id else []
        written = write_sorted(table.location(), self.state, self.key_columns, run_id=self.run_id,
                               partition_by=self.partition_by, target_rows=self.target_rows,
                               io_fs=table_fs(table, table.location()), prefix="rebuild")
        self.stats = RewriteStats(len(tasks), 0, sum(t.file.record_count for t in tasks),
                                  self.state.num_rows, len(written))
        return [t.file for t in tasks], written


def rebuild_commit(run_id: str, key_columns: Sequence[str], partition_by: Sequence[str],
                   claims, state, staged, *, audit, expected,
                   target_rows: int = DEFAULT_TARGET_ROWS):
    """The reprocess commit of an upsert table: ``state`` (rows as of the base snapshot,
    None: empty) merged with the replayed ``staged`` rows replaces the whole table."""
    import pyarrow as pa

    from ..warehouse.commit import KafkaCommit  # lazy: pyiceberg start-up

    keys = tuple(key_columns)
    schema = None
    if staged is not None and staged.num_rows:
        check_staged(staged)
        rows, _ = keyed_rows(staged, keys)
        winners = reduce_batch(rows, keys)
        schema = nullable(staged.drop_columns([TOMBSTONE]).schema
                          if TOMBSTONE in staged.column_names else staged.schema)
        if state is None or state.num_rows == 0:
            keep = pa.array([], pa.bool_())
            state = None
            _, insert = merge(winners.slice(0, 0), winners, keys)
        else:
            keep, insert = merge(state, winners, keys)
        new = winners.filter(pa.array(insert)).drop_columns([TOMBSTONE])
        parts = ([state.filter(pa.array(keep))] if state is not None else []) + [new]
        state = _union(parts)
    if state is None:
        state = pa.table({})
    return KafkaCommit(run_id, "reprocess", tuple(claims), (), schema=schema, audit=audit,
                       expected=expected,
                       rewrite=RebuildRewrite(state, keys, tuple(partition_by), run_id,
                                              target_rows))
