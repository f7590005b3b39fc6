"""Writing Parquet data files for Iceberg tables (Spark-free; runs on executors).

:func:`write_files` takes Kafka-schema rows (plus decoded columns) and writes
them under ``<table location>/data/`` through fsspec/pyarrow:

* one file holds one (topic, partition) and one value of every partition field
  of the table's spec (``day(timestamp)`` by default, see
  :func:`pipelines.spec.table_layout.parse_partition_field`), so the driver can add it
  to a snapshot with its partition value read from the column bounds;
* timestamps are written as ``TIMESTAMP_MICROS`` (Spark's INT96 default cannot be
  committed): with UTC (Iceberg's ``timestamptz``) or without a zone (``timestamp``)
  as the table's column is, a new column as its values are (see
  :func:`micros_timestamps`);
* rows are sorted by offset, at most ``max_rows_per_file`` per file;
* no Parquet field ids: the table's name mapping maps columns by name.

It returns one descriptor (:data:`DESCRIPTOR_DDL`) per file, with the file's
Parquet footer (as a standalone metadata file: the commit builds the Iceberg
data file entry from it, see :func:`pipelines.warehouse.commit.data_file`). Files are
invisible until a snapshot lists them; files of failed task attempts are never
collected and ``kafkastore vacuum`` removes them after the grace period.
"""
from __future__ import annotations

import re
import uuid
from typing import Any, Iterable, Mapping, Sequence

from kafkastore.errors import ConfigError, WarehouseError

from ..spec.table_layout import TableLayout, parse_partition_field

KINDS = ("data", "dead_letter")
DESCRIPTOR_DDL = ("url string, kind string, topic string, partition int, min_offset bigint, "
                  "max_offset bigint, rows bigint, bytes bigint, footer binary")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_US = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": None}
_TIME_UNITS_US = {"hour": 3_600_000_000, "day": 86_400_000_000}


def descriptor_schema():
    import pyarrow as pa

    return pa.schema([("url", pa.string()), ("kind", pa.string()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("min_offset", pa.int64()),
                      ("max_offset", pa.int64()), ("rows", pa.int64()), ("bytes", pa.int64()),
                      ("footer", pa.binary())])


def micros_timestamps(data, zoned: Mapping[str, bool] | None = None):
    """Cast every timestamp column to microseconds: ``timestamp[us, UTC]`` (Iceberg
    timestamptz) or ``timestamp[us]`` (Iceberg timestamp, no zone).

    ``zoned``: ``{column: has a zone}`` of the target table's timestamp columns. A
    column the table has keeps the table's kind (a table created with a zoned column
    for wall-clock values keeps loading: they are stored as UTC, as they always
    were); any other keeps its own (a local timestamp stays without zone)."""
    import pyarrow as pa

    zoned = zoned or {}
    for i, f in enumerate(data.schema):
        if not pa.types.is_timestamp(f.type):
            continue
        want_zone = zoned.get(f.name, f.type.tz is not None)
        target = pa.timestamp("us", tz="UTC") if want_zone else pa.timestamp("us")
        if f.type == target:
            continue
        col = data.column(i)
        if f.type.tz is None and want_zone:
            col = col.cast(pa.timestamp(f.type.unit, tz="UTC"))   # wall clock read as UTC
        elif f.type.tz is not None and not want_zone:
            col = col.cast(pa.timestamp(f.type.unit))              # the UTC wall clock
        data = data.set_column(i, pa.field(f.name, target, f.nullable),
                               col.cast(target, safe=False))
    return data


def timestamp_zones(schema) -> dict[str, bool]:
    """``{column: has a zone}`` of the top-level timestamp columns of an Iceberg
    schema (what :func:`micros_timestamps` writes them as)."""
    from pyiceberg.types import TimestampType, TimestamptzType

    out: dict[str, bool] = {}
    for f in schema.fields:
        if isinstance(f.field_type, (TimestampType, TimestamptzType)):
            out[f.name] = isinstance(f.field_type, TimestamptzType)
    return out


def partition_keys(data, partition_by: Sequence[str]):
    """One key array per partition field (values equal iff same partition value)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = []
    for text in partition_by:
        kind, column = parse_partition_field(text)
        if column not in data.column_names:
            raise ConfigError(f"partition field {text!r}: the rows have no column {column!r}")
        col = data.column(column)
        if kind == "identity":
            keys.append(col)
            continue
        if not pa.types.is_timestamp(col.type):
            raise ConfigError(f"partition field {text!r}: {column!r} is not a timestamp")
        if kind in _TIME_UNITS_US:
            us = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
            keys.append(pa.array(np.floor_divide(us, _TIME_UNITS_US[kind]),
                                 mask=pc.is_null(col).to_numpy(zero_copy_only=False)))
        elif kind == "month":
            keys.append(pc.add(pc.multiply(pc.year(col), 12), pc.month(col)))
        else:
            keys.append(pc.year(col))
    return keys


def partition_label(text: str, value) -> str:
    """The path label (``timestamp_day=2024-01-02``) of one partition field's value."""
    kind, column = parse_partition_field(text)
    name = column if kind == "identity" else f"{column}_{kind}"
    if value is None:
        return f"{name}=null"
    if kind == "day":
        import datetime as dt

        value = (dt.date(1970, 1, 1) + dt.timedelta(days=int(value))).isoformat()
    return f"{name}={_SAFE.sub('_', str(value))[:64]}"


def write_files(location: str, data, *, run_id: str, layout: TableLayout = TableLayout(),
                storage_options: dict | None = None, kind: str = "data",
                zoned: Mapping[str, bool] | None = None) -> list[dict[str, Any]]:
    """Write ``data`` (a pyarrow Table, RecordBatch or iterable of batches, with
    ``topic``, ``partition``, ``offset``) as Parquet files under ``location``
    (the table's location), laid out as the table's ``layout`` says (its partition
    fields, rows per file, codec); return one descriptor dict per file. ``zoned``: the
    table's timestamp columns (:func:`micros_timestamps`)."""
    import fsspec
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {KINDS}, got {kind!r}")
    if isinstance(data, pa.RecordBatch):
        tbl = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        tbl = data
    else:
        batches = [b for b in data if b.num_rows]
        if not batches:
            return []
        tbl = pa.Table.from_batches(batches)
    if tbl.num_rows == 0:
        return []
    for name in ("topic", "partition", "offset"):
        if name not in tbl.column_names or tbl.column(name).null_count:
            raise ConfigError(f"rows to write need a non-null {name!r} column")
    tbl = micros_timestamps(tbl, zoned)
    partition_by, max_rows_per_file = layout.partition_by, layout.max_rows_per_file
    keys = partition_keys(tbl, partition_by)
    names = [f"__k{i}" for i in range(len(keys))]
    keyed = tbl
    for n, k in zip(names, keys):
        keyed = keyed.append_column(n, k)
    # The rows of each file group by number (one hash pass): filtering the whole table once
    # per group cost groups x rows, and a task packing many partitions has many groups.
    nrows = keyed.num_rows
    keyed = keyed.append_column("__row", pa.array(np.arange(nrows, dtype=np.int64)))
    groups = keyed.group_by(["topic", "partition"] + names, use_threads=False).aggregate(
        [("__row", "list")])
    keyed = keyed.drop_columns(["__row"] + names)
    lists = groups.column("__row_list").combine_chunks()
    order = lists.flatten().to_numpy()            # row numbers, group after group
    bounds = lists.offsets.to_numpy()
    if not np.array_equal(order, np.arange(nrows)):
        # One gather puts each group's rows together; a take per group would concatenate
        # every chunk of the table again each time (a task reads hundreds of batches).
        keyed = keyed.take(pa.array(order))
    offsets = keyed.column("offset").to_numpy()
    fs, root = fsspec.core.url_to_fs(location.rstrip("/"), **(storage_options or {}))
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    out: list[dict[str, Any]] = []
    for i, g in enumerate(groups.drop_columns(["__row_list"]).to_pylist()):
        a, b = int(bounds[i]), int(bounds[i + 1])
        part = keyed.slice(a, b - a)
        if (np.diff(offsets[a:b]) < 0).any():   # reads come in offset order: rarely taken
            part = part.sort_by("offset")
        labels = "/".join(partition_label(t, g[n]) for t, n in zip(partition_by, names))
        for start in range(0, part.num_rows, max_rows_per_file):
            chunk = part.slice(start, max_rows_per_file)
            lo = pc.min(chunk.column("offset")).as_py()
            hi = pc.max(chunk.column("offset")).as_py()
            rel = "/".join(x for x in ("data", labels, f"{kind}-{g['partition']}-{lo:020d}-"
                                       f"{_SAFE.sub('_', run_id)[:48]}-{uuid.uuid4().hex[:12]}.parquet") if x)
            buf = pa.BufferOutputStream()
            written: list = []
            pq.write_table(chunk, buf, compression=layout.compression,
                           metadata_collector=written)
            body = buf.getvalue()
            # The file's footer as a standalone metadata file: the driver adds the file
            # to a snapshot from it instead of reading every new file's footer back.
            footer = pa.BufferOutputStream()
            written[0].write_metadata_file(footer)
            path = f"{root}/{rel}"
            if local:
                fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            # One whole-object put: atomic on object stores, exact size.
            fs.pipe_file(path, body.to_pybytes())
            out.append({"url": f"{location.rstrip('/')}/{rel}", "kind": kind,
                        "topic": g["topic"], "partition": int(g["partition"]),
                        "min_offset": int(lo), "max_offset": int(hi), "rows": chunk.num_rows,
                        "bytes": body.size, "footer": footer.getvalue().to_pybytes()})
    return out


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


def iceberg_layout(schema, layout: TableLayout) -> dict[str, Any]:
    """The keyword arguments of an Iceberg table's creation (pyiceberg's
    ``Catalog.create_table``) that declare ``layout`` over ``schema`` (Iceberg): how the
    files :func:`write_files` lays out are described to Iceberg readers (the partition
    spec of ``partition_by``)."""
    return {"partition_spec": partition_spec(schema, layout.partition_by)}


def check_disjoint(files: Iterable[dict[str, Any]]) -> None:
    """Refuse two files of one kind holding the same offset of one partition.

    Spark discards the output of failed and duplicate task attempts, so this
    never fires unless something upstream double-reads; cheap insurance for
    the exactly-once promise."""

    by_tp: dict[tuple, list[dict]] = {}
    for f in files:
        by_tp.setdefault((f["topic"], f["partition"], f["kind"]), []).append(f)
    for tp, fs in by_tp.items():
        fs.sort(key=lambda f: f["min_offset"])
        for a, b in zip(fs, fs[1:]):
            if b["min_offset"] <= a["max_offset"]:
                raise WarehouseError(f"two written files of {tp[0]}/{tp[1]} ({tp[2]}) overlap: "
                                     f"{a['url']} and {b['url']}; nothing was committed")
