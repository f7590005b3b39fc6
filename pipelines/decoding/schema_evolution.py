"""How a writer schema's columns meet a table's: the evolution rules of registry loads.

Pure functions on Arrow types (pyiceberg converts them one to one to Iceberg
types). :func:`merge_types` is the one rule, used three times: on the executors
(is this writer schema compatible with the table the load started from?), on
the driver (the union of every writer schema a load met, which
``update_schema().union_by_name`` applies in the commit of the data), and
between writer schemas of one load.

* a field the table lacks becomes a new optional column (nested too);
* a field the writer lacks is null in its rows (columns are never dropped or
  renamed by a load);
* int and long give long, float and double give double, decimal(p1, s) and
  decimal(p2, s) give decimal(max(p1, p2), s): the promotions Iceberg allows;
* a timestamp without a zone (Avro's local-timestamp-*) fits a table's column
  with a zone, made so by an older version: its wall-clock time is stored as UTC,
  as that table always stored it;
* any other difference (string vs long, a struct vs a list, a decimal's scale,
  a zoned timestamp for a column without a zone...) is an :class:`IncompatibleChange`:
  those records go to the dead letters with the reason, or the load stops
  (``onIncompatible``).
"""
from __future__ import annotations

from typing import Any


from kafkastore.errors import IncompatibleChangeError

IncompatibleChange = IncompatibleChangeError


def normalize(t):
    """``t`` without large types and field metadata (pyiceberg's Arrow schemas use
    large_string/large_list and carry field ids; the decoders build plain types)."""
    import pyarrow as pa

    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, normalize(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", normalize(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(pa.field("key", normalize(t.key_type), False),
                       pa.field("value", normalize(t.item_type)))
    return t


def normalize_schema(schema):
    """A pyarrow schema normalized field by field (see :func:`normalize`)."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, normalize(f.type)) for f in schema])


def merge_types(table: Any, writer: Any, path: str = "value"):
    """The type that holds both ``table``'s and ``writer``'s values (see the module
    docstring), or :class:`IncompatibleChange` naming ``path``."""
    import pyarrow as pa

    if table == writer:
        return table
    if pa.types.is_null(table):
        return writer
    if pa.types.is_null(writer):
        return table
    if pa.types.is_struct(table) and pa.types.is_struct(writer):
        fields = []
        wnames = {writer.field(i).name: writer.field(i).type for i in range(writer.num_fields)}
        tnames = set()
        for i in range(table.num_fields):
            f = table.field(i)
            tnames.add(f.name)
            t = f.type
            if f.name in wnames:
                t = merge_types(f.type, wnames[f.name], _join(path, f.name))
            fields.append(pa.field(f.name, t))
        for i in range(writer.num_fields):
            f = writer.field(i)
            if f.name not in tnames:
                fields.append(pa.field(f.name, f.type))
        return pa.struct(fields)
    if _is_list(table) and _is_list(writer):
        return pa.list_(pa.field("element", merge_types(table.value_type, writer.value_type,
                                                        f"{path}[]")))
    if pa.types.is_map(table) and pa.types.is_map(writer):
        k = merge_types(table.key_type, writer.key_type, _join(path, "key"))
        v = merge_types(table.item_type, writer.item_type, _join(path, "value"))
        return pa.map_(pa.field("key", k, False), pa.field("value", v))
    ints = (pa.int32(), pa.int64())
    if table in ints and writer in ints:
        return pa.int64()
    floats = (pa.float32(), pa.float64())
    if table in floats and writer in floats:
        return pa.float64()
    if pa.types.is_decimal(table) and pa.types.is_decimal(writer):
        if table.scale != writer.scale:
            raise IncompatibleChange(f"{path}: decimal scale {writer.scale} differs from the "
                                     f"table's {table.scale} ({table})")
        return pa.decimal128(max(table.precision, writer.precision), table.scale)
    if (pa.types.is_timestamp(table) and pa.types.is_timestamp(writer)
            and table.tz is not None and writer.tz is None):
        return table
    raise IncompatibleChange(f"{path}: the writer's {_name(writer)} cannot be stored in the "
                             f"table's {_name(table)} column")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_list(t) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _name(t) -> str:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return "struct"
    if _is_list(t):
        return "list"
    if pa.types.is_map(t):
        return "map"
    return str(t)


def merge_schemas(table_schema, writer_schema, clash: frozenset = frozenset()):
    """Merge two pyarrow schemas (top-level columns) by :func:`merge_types`.
    ``clash``: names the writer may not use (the Kafka columns next to flattened
    fields): IncompatibleChange if it does."""
    import pyarrow as pa

    bad = sorted(set(writer_schema.names) & set(clash))
    if bad:
        raise IncompatibleChange(f"field(s) {bad} clash with the Kafka columns of the table; "
                                 f"load with flatten=false to keep the value as a struct")
    merged = merge_types(pa.struct(list(normalize_schema(table_schema))),
                         pa.struct(list(normalize_schema(writer_schema))), "")
    return pa.schema([merged.field(i) for i in range(merged.num_fields)])


def fit(array, target):
    """``array`` cast to ``target`` (a type :func:`merge_types` produced from the
    array's type: missing struct fields become null, promotions widen)."""
    if array.type == target:
        return array
    return array.cast(target)
