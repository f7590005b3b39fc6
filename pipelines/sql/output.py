"""Printing query results: rows streamed from Spark as a text table or as JSON lines
(binary as UTF-8 text or ``{"base64": ...}``, timestamps ISO 8601 in UTC).
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
from dataclasses import dataclass
from typing import Any, Iterator, TextIO



_TABLE_CELL_MAX = 120       # characters per cell in table output; longer values end in "..."
_WIDTH_SAMPLE = 1000        # rows buffered to size the table columns before streaming the rest


def _prepared(df):
    """(DataFrame with top-level timestamps as epoch microseconds, their names).

    Python's Row conversion renders timestamps in the *process* time zone; epoch
    microseconds keep them exact, and we print them in UTC ourselves. Timestamps
    without a zone (``timestamp_ntz``) become ISO text in Spark.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    micros, cols, changed = set(), [], False
    for field in df.schema.fields:
        c = F.col(f"`{field.name}`")
        if isinstance(field.dataType, TimestampType):
            micros.add(field.name)
            c, changed = F.unix_micros(c).alias(field.name), True
        elif isinstance(field.dataType, TimestampNTZType):
            c = F.date_format(c, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS").alias(field.name)
            changed = True
        cols.append(c)
    return (df.select(*cols) if changed else df), micros


def _rows(df) -> Iterator[dict[str, Any]]:
    """The rows of ``df`` as ``{column: value}``, streamed partition by partition."""
    prepared, micros = _prepared(df)
    names = df.columns
    for row in prepared.toLocalIterator(prefetchPartitions=True):
        yield {name: (_Micros(value) if name in micros and value is not None else value)
               for name, value in zip(names, row)}


@dataclass(frozen=True)
class _Micros:
    """A timestamp as epoch microseconds (exact), printed as ISO 8601."""

    us: int

    def iso(self) -> str:
        t = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=self.us)
        return t.isoformat(timespec="milliseconds" if self.us % 1000 == 0 else "microseconds") + "Z"


def to_json_value(value: Any) -> Any:
    """A query result value as JSON: bytes as UTF-8 text or ``{"base64": ...}``,
    timestamps and dates ISO 8601, decimals as numbers, rows and maps as objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        finite = value == value and value not in (float("inf"), float("-inf"))
        return value if finite else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, _Micros):
        return value.iso()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
            return value.isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "asDict"):
        return {k: to_json_value(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(to_json_value(k)): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    return str(value)


def write_jsonl(df, out: TextIO) -> int:
    """Write ``df`` as JSON lines; returns the row count."""
    n = 0
    for row in _rows(df):
        out.write(json.dumps({k: to_json_value(v) for k, v in row.items()},
                             ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    return n


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        v = to_json_value(value)
        text = v if isinstance(v, str) else "base64:" + v["base64"]
    elif isinstance(value, _Micros):
        text = value.iso()
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (bool, int)):
        text = str(value).lower() if isinstance(value, bool) else str(value)
    else:
        text = json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(text) > _TABLE_CELL_MAX:
        text = text[:_TABLE_CELL_MAX - 3] + "..."
    return text


def write_table(df, out: TextIO) -> int:
    """Write ``df`` as an aligned text table (Spark's ``show`` style, cells up to
    120 characters, every row); returns the row count."""
    names = df.columns
    numeric = {f.name for f in df.schema.fields
               if f.dataType.typeName() in ("byte", "short", "integer", "long", "float", "double",
                                            "decimal")}
    rows = _rows(df)
    head: list[list[str]] = []
    for row in rows:
        head.append([_cell(row[n]) for n in names])
        if len(head) >= _WIDTH_SAMPLE:
            break
    widths = [max([len(n)] + [len(r[i]) for r in head]) for i, n in enumerate(names)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+\n"

    def fmt(cells):
        parts = []
        for i, (c, w) in enumerate(zip(cells, widths)):
            c = c if len(c) <= w else c[:max(0, w - 3)] + "..."
            parts.append(c.rjust(w) if names[i] in numeric else c.ljust(w))
        return "| " + " | ".join(parts) + " |\n"

    out.write(line + fmt(names) + line)
    count = 0
    for cells in head:
        out.write(fmt(cells))
        count += 1
    for row in rows:   # the rest streams with the widths of the first rows
        out.write(fmt([_cell(row[n]) for n in names]))
        count += 1
    out.write(line)
    out.write(f"({count} row{'s' if count != 1 else ''})\n")
    return count
