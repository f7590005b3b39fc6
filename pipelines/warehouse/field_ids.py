"""Reading Iceberg data files by field id, not by column name (DESIGN.md section 5).

An Iceberg reader resolves a data file's columns by **field id**: a column
renamed after the file was written keeps its id, a dropped column's id is
never read again (even when a new column takes its name), and a promoted
column (``int`` -> ``long``, ``float`` -> ``double``, wider decimals) is cast.
Spark's own Parquet reader matches by name, which is right only while names
and types never changed. This module decides, per snapshot read, whether that
holds, and if not how each file must be read:

* :func:`needs_field_ids`: pure, from table metadata alone (no file read):
  False when no schema of the table's history and no name-mapping entry gives
  a field of the read schema another name or type, or gives one of its names
  to another id. Then Spark reads the files by name as before (the common
  path: nothing more to do).
* :func:`file_columns`: a file's top-level columns by field id, from its
  Parquet footer: the ``PARQUET:field_id`` of each column when the writer set
  one, else by name (kafkastore writes no field ids; its files are mapped by
  name, see :mod:`pipelines.warehouse.files`): among the ids that name ever had,
  the one the file's manifest entry has statistics for (so a column dropped
  and added again under its old name reads as null in files written before),
  else the current name mapping's.
* :func:`plan_reads`: groups the files that read alike (same column for every
  field, same types), each group read by Spark with the file's own names and
  types and projected to the read schema (renamed, cast, absent columns as
  nulls); a file whose nested columns differ goes to pyiceberg's Arrow reader
  (:class:`ReadPlan.arrow`), which resolves ids at every depth.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

#: Spark types of the Parquet columns a group may read (Arrow type -> Spark DDL type).
_ARROW_TO_SPARK = {"bool": "boolean", "int32": "int", "int64": "bigint", "float": "float",
                   "double": "double", "string": "string", "large_string": "string",
                   "binary": "binary", "large_binary": "binary", "date32[day]": "date"}


def _is_nested(t) -> bool:
    from pyiceberg.types import ListType, MapType, StructType

    return isinstance(t, (StructType, ListType, MapType))


def needs_field_ids(metadata, schema) -> bool:
    """Whether reading ``schema`` (the schema a snapshot is read with) by column name
    could differ from reading it by field id, given every schema in ``metadata``'s
    history and its name mapping (see the module docstring)."""
    from pyiceberg.schema import index_by_id

    wanted = index_by_id(schema)
    top = {f.name: f.field_id for f in schema.fields}
    for other in metadata.schemas:
        for fid, f in index_by_id(other).items():
            mine = wanted.get(fid)
            if mine is None:
                continue
            if mine.name != f.name:
                return True          # renamed
            if _is_nested(mine.field_type) != _is_nested(f.field_type):
                return True
            if not _is_nested(mine.field_type) and mine.field_type != f.field_type:
                return True          # promoted
        for f in other.fields:
            if f.name in top and top[f.name] != f.field_id:
                return True          # dropped and added again under the same name
    mapping = metadata.name_mapping()
    for mf in (mapping or ()):
        if mf.field_id in wanted and list(mf.names) != [wanted[mf.field_id].name]:
            return True              # another engine's rename kept the old name mapped
        if mf.field_id not in wanted and any(n in top for n in mf.names):
            return True
    return False


@dataclass(frozen=True)
class NameIds:
    """What a column name meant over the table's history: ``current`` the name
    mapping's (or the read schema's) id per name, ``ever`` every id a top-level name
    had in any schema or mapping entry."""

    current: dict[str, int]
    ever: dict[str, frozenset[int]]

    @classmethod
    def of(cls, metadata, schema) -> "NameIds":
        mapping = metadata.name_mapping()
        current = {f.name: f.field_id for f in schema.fields}
        ever: dict[str, set[int]] = {}
        for mf in (mapping or ()):
            for n in mf.names:
                current.setdefault(n, mf.field_id)
                ever.setdefault(n, set()).add(mf.field_id)
        if mapping is not None:
            current.update({n: mf.field_id for mf in mapping for n in mf.names})
        for s in metadata.schemas:
            for f in s.fields:
                ever.setdefault(f.name, set()).add(f.field_id)
        return cls(current, {n: frozenset(v) for n, v in ever.items()})


def file_columns(arrow_schema, names: NameIds, present: frozenset[int] = frozenset()
                 ) -> dict[int, Any]:
    """``{field id: pyarrow field}`` of a file's top-level columns.

    A column's id is its ``PARQUET:field_id`` when the writer set one. Otherwise its
    name decides, as the file's manifest entry recorded it: ``present`` holds the ids
    the entry has column statistics for (computed from the name mapping when the file
    was committed), so a name that several ids had over time (a column dropped and
    added again) resolves to the one the file was written with. Without statistics
    the current name mapping decides (what pyiceberg does). A column with no id is not
    a table column."""
    out: dict[int, Any] = {}
    for f in arrow_schema:
        raw = (f.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            out[int(raw)] = f
            continue
        fid = names.current.get(f.name)
        if present:
            hits = names.ever.get(f.name, frozenset()) & present
            if len(hits) == 1:
                (fid,) = hits
            elif len(hits) > 1 and fid not in hits:
                fid = max(hits)
        if fid is not None:
            out[fid] = f
    return out


@dataclass
class ReadGroup:
    """Files read alike by Spark: ``columns`` the file columns to read (name, Spark
    type), ``select`` per read-schema field ``(name, file column or None, cast or None)``."""

    columns: tuple[tuple[str, str], ...]
    select: tuple[tuple[str, str | None, str | None], ...]
    urls: list[str] = field(default_factory=list)


@dataclass
class ReadPlan:
    """How to read a snapshot's files by field id: Spark groups, plus the files
    (indexes into the planned tasks) that only pyiceberg's Arrow reader resolves."""

    groups: list[ReadGroup]
    arrow: list[int]


def _group_key(schema, cols: dict[int, Any], spark_type: Callable[[Any], str]):
    """(columns, select) for a file whose columns are ``cols``; None: Arrow only."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    columns, select = [], []
    for f in schema.fields:
        col = cols.get(f.field_id)
        target = spark_type(f.field_type)
        if col is None:
            select.append((f.name, None, target))
            continue
        if _is_nested(f.field_type):
            want = schema_to_pyarrow(f.field_type, include_field_ids=False)
            if not col.type.equals(want, check_metadata=False):
                return None
            have = target
        else:
            have = _spark_of_arrow(col.type)
            if have is None:
                return None
        columns.append((col.name, have))
        select.append((f.name, col.name, None if have == target else target))
    return tuple(columns), tuple(select)


def _spark_of_arrow(t) -> str | None:
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    return _ARROW_TO_SPARK.get(str(t))


def plan_reads(schema, names: NameIds, files: Sequence[tuple[str, frozenset[int]]],
               read_schema: Callable[[str], Any], spark_type: Callable[[Any], str],
               threads: int = 8) -> ReadPlan:
    """Group ``files`` (``(URL, ids with column statistics)``) by how their columns
    resolve against ``schema``. ``read_schema(url)``: the file's Arrow schema (its
    footer), read in parallel."""
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files)))) as pool:
        schemas = list(pool.map(read_schema, [u for u, _ in files]))
    groups: dict[Any, ReadGroup] = {}
    arrow: list[int] = []
    for i, ((url, present), s) in enumerate(zip(files, schemas)):
        key = _group_key(schema, file_columns(s, names, present), spark_type)
        if key is None:
            arrow.append(i)
            continue
        groups.setdefault(key, ReadGroup(*key)).urls.append(url)
    return ReadPlan(list(groups.values()), arrow)
