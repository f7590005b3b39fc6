"""Decode Confluent-framed values into Arrow arrays, grouped by writer schema id.

A framed value is magic byte 0, the schema id (4 bytes, big-endian) and the
body; Protobuf puts the message indexes (a zigzag-varint count, then the
indexes; a single 0 byte for ``[0]``) between the id and the body. Values of
one batch are grouped by schema id and each group decoded with that id's writer
schema into one Arrow struct array (:mod:`pipelines.decoding.type_mapping` gives its
type). A value without a header, with an id the registry does not know, or a
body that does not decode gets an error text instead: a dead letter, never a
null row. A null value (a tombstone) is a row whose decoded fields are null.
"""
from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field
from typing import Any

from kafkastore.errors import CorruptRecordError, RegistryFetchError
from kafkastore.format.varint import decode_varint

from .type_mapping import (Mapped, UnmappableSchema, avro_mapping, json_schema_mapping,
                           protobuf_mapping)

FORMATS = ("avro", "protobuf", "json-schema")
_REGISTRY_TYPE = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` (Kafka's, :func:`kafkastore.format.varint.decode_varint`):
    (value, next position); ValueError if cut short or malformed."""
    try:
        return decode_varint(buf, pos)
    except CorruptRecordError as exc:
        raise ValueError(f"the message indexes end before their varint does ({exc})") from None


def split_frame(value: bytes, fmt: str) -> tuple[int, tuple[int, ...], int]:
    """``(schema id, message indexes, body start)`` of a framed value; ValueError
    naming what is wrong."""
    if len(value) < 5 or value[0] != 0:
        raise ValueError("no schema registry header (magic byte 0 + 4-byte schema id)")
    sid = int.from_bytes(value[1:5], "big")
    if fmt != "protobuf":
        return sid, (), 5
    count, pos = read_varint(value, 5)
    if count == 0:
        return sid, (0,), pos
    if count < 0 or count > 100:
        raise ValueError(f"bad protobuf message index count {count}")
    idx = []
    for _ in range(count):
        i, pos = read_varint(value, pos)
        idx.append(i)
    return sid, tuple(idx), pos


class GroupDecoder:
    """Decodes the bodies of one writer schema (and, for Protobuf, one message).
    ``mapped``: how decoded values become Arrow (``read_type``, cast to ``arrow``)."""

    mapped: Mapped
    final: Any = None   # the table-facing type when it differs from mapped.arrow

    @property
    def arrow(self):
        return self.final if self.final is not None else self.mapped.arrow

    def _array(self, records):
        import pyarrow as pa

        arr = pa.array(records, type=self.mapped.arrow)
        return arr if self.final is None else arr.cast(self.final)

    def decode_one(self, value: bytes, start: int):
        raise NotImplementedError

    def decode_many(self, values: list[bytes], starts: list[int]):
        """``(struct array, errors)``: one entry per value; a failed value is null in
        the array and has its error text."""
        import pyarrow as pa

        records, errors = [], []
        conv = self.mapped.convert
        for v, s in zip(values, starts):
            try:
                rec = self.decode_one(v, s)
                records.append(conv(rec) if conv is not None else rec)
                errors.append(None)
            except Exception as exc:   # any data error is a dead letter, never a crash
                records.append(None)
                errors.append(f"{self.label} decode failed: {type(exc).__name__}: "
                              f"{exc or 'value ends early'}")
        return self._arrays(records, errors)

    def _arrays(self, records, errors):
        import pyarrow as pa

        try:
            return out_of_range_to_dead_letters(self._array(records), errors, self.label)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # One value spoils the conversion of the group: find it value by value.
            parts = []
            for i, rec in enumerate(records):
                try:
                    parts.append(self._array([rec]))
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    errors[i] = f"{self.label} value does not fit {self.arrow}: {exc}"
                    parts.append(pa.nulls(1, self.arrow))
            return out_of_range_to_dead_letters(pa.concat_arrays(parts), errors, self.label)

    label = "value"


class AvroGroupDecoder(GroupDecoder):
    label = "Avro"

    def __init__(self, ws, debezium: bool = False, kept: frozenset = frozenset()):
        """``debezium``: Debezium's encodings (``connect.name``) become dates, times,
        timestamps and decimals (:mod:`pipelines.decoding.debezium_types`), but in the fields
        named in ``kept`` (:func:`pipelines.decoding.debezium_types.stored_columns`)."""
        import fastavro

        from . import debezium_types  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

        named: dict = {}
        raw_refs = []
        for ref in reversed(list(ws.all_references().values())):
            raw = json.loads(ref.text)
            if debezium:
                raw = debezium_types.avro_schema(raw, kept)
            raw_refs.append(raw)
            fastavro.parse_schema(raw, named_schemas=named)
        schema = json.loads(ws.text)
        if debezium:
            schema = debezium_types.avro_schema(schema, kept)
        from .type_mapping import avro_named_types  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

        refs = avro_named_types(raw_refs)
        self.final = avro_mapping(schema, refs, debezium=debezium).arrow
        # Dates, times and timestamps are read as the integers Avro stores and cast by
        # Arrow: no Python datetime per value.
        self.mapped = avro_mapping(schema, refs, raw_time=True, debezium=debezium)
        raw_named: dict = {}
        for raw in raw_refs:
            fastavro.parse_schema(_raw_time(raw), named_schemas=raw_named)
        self.parsed = fastavro.parse_schema(_raw_time(schema), named_schemas=raw_named)
        self.is_record = isinstance(schema, dict) and schema.get("type") == "record"
        self._reader = fastavro.schemaless_reader
        from . import avro_columns  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

        self._names: dict = {}
        for raw in raw_refs:
            avro_columns.supported(raw, self._names)
        self._schema = schema
        # Encodings converted value by value are read by fastavro.
        self.columnar = avro_columns.supported(schema, self._names) and not (
            debezium and any(map(debezium_types.avro_converted, [schema, *raw_refs])))

    def decode_array(self, values, starts: list[int]):
        """Like :meth:`decode_many` for an Arrow binary array: read column by column
        (:mod:`pipelines.decoding.avro_columns`) when the schema allows and every value is
        clean, else value by value."""
        import numpy as np
        import pyarrow as pa

        if self.columnar and len(values):
            from . import avro_columns  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

            offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
                values.offset:values.offset + len(values) + 1].astype(np.int64)
            data = values.buffers()[2].to_pybytes()
            arr = avro_columns.decode(self._schema, self._names, self.mapped.arrow, data,
                                      offsets[:-1] + np.asarray(starts, dtype=np.int64),
                                      offsets[1:])
            if arr is not None:
                if self.final is not None and arr.type != self.final:
                    try:
                        arr = arr.cast(self.final)
                    except (pa.ArrowException, OverflowError):
                        # A value the table's type cannot hold (a timestamp-millis of
                        # Long.MAX_VALUE): value by value, it becomes a dead letter.
                        return self.decode_many(values.to_pylist(), starts)
                return out_of_range_to_dead_letters(arr, [None] * len(values), self.label)
        return self.decode_many(values.to_pylist(), starts)

    def decode_many(self, values: list[bytes], starts: list[int]):
        """All bodies of the group read from one buffer, each checked to end where its
        value ends; any failure falls back to value-by-value decoding for the reasons."""
        reader, parsed = self._reader, self.parsed
        data = b"".join(values)
        bio = io.BytesIO(data)
        records = []
        pos = 0
        try:
            for v, s in zip(values, starts):
                bio.seek(pos + s)
                rec = reader(bio, parsed, None, return_record_name=True,
                             return_record_name_override=True)
                pos += len(v)
                if bio.tell() != pos:
                    raise ValueError("misaligned")
                records.append(rec)
        except Exception:   # a bad value somewhere: redo the group carefully
            return super().decode_many(values, starts)
        if not self.is_record:
            records = [{"value": r} for r in records]
        conv = self.mapped.convert
        if conv is not None:
            try:
                records = [conv(r) for r in records]
            except Exception:   # noqa: BLE001 - the careful path names the value
                return super().decode_many(values, starts)
        return self._arrays(records, [None] * len(records))

    def decode_one(self, value: bytes, start: int):
        bio = io.BytesIO(value)
        bio.seek(start)
        rec = self._reader(bio, self.parsed, None, return_record_name=True,
                           return_record_name_override=True)
        left = len(value) - bio.tell()
        if left:
            raise ValueError(f"{left} byte(s) left after the Avro datum")
        return rec if self.is_record else {"value": rec}


# What Iceberg, Spark and Python can hold: years 1..9999, times of day within a day.
_DAY_US = 86_400_000_000
_MIN_DAYS, _MAX_DAYS = -719_162, 2_932_896          # 0001-01-01, 9999-12-31
_MIN_US, _MAX_US = _MIN_DAYS * _DAY_US, (_MAX_DAYS + 1) * _DAY_US - 1


def _bad_temporal(arr, path: str = "") -> list:
    """``[(path, type, mask)]``: for each date, time or timestamp field of ``arr`` (any
    type; structs walked, ``path`` naming the field), a boolean mask of its values
    outside the range the table can hold, where any is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_struct(t):
        out = []
        for i in range(t.num_fields):
            name = t.field(i).name
            out += _bad_temporal(arr.field(i), f"{path}.{name}" if path else name)
        return out
    if pa.types.is_date32(t):
        lo, hi, ints = _MIN_DAYS, _MAX_DAYS, arr.cast(pa.int32())
    elif pa.types.is_timestamp(t) and t.unit == "us":
        lo, hi, ints = _MIN_US, _MAX_US, arr.cast(pa.int64())
    elif pa.types.is_time64(t) and t.unit == "us":
        lo, hi, ints = 0, _DAY_US - 1, arr.cast(pa.int64())
    else:
        return []
    bad = pc.fill_null(pc.or_(pc.less(ints, lo), pc.greater(ints, hi)), False)
    return [(path, t, bad)] if pc.any(bad).as_py() else []


def out_of_range_to_dead_letters(arr, errors: list, label: str):
    """``(arr, errors)`` with each row holding a date, time or timestamp the table cannot
    hold (outside years 1..9999, a time of day past midnight) nulled and given its reason
    (naming the field): a dead letter, like any other value that does not fit."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = _bad_temporal(arr)
    if not found:
        return arr, errors
    errors = list(errors)
    bad = found[0][2]
    for path, t, mask in found:
        bad = pc.or_(bad, mask)
        for i in pc.indices_nonzero(mask).to_pylist():
            if errors[i] is None:
                errors[i] = (f"{label} value {path or 'value'} does not fit {t}: a date, time or "
                             f"timestamp outside years 1..9999 or a time of day outside "
                             f"00:00..24:00")
    return pc.if_else(bad, pa.scalar(None, arr.type), arr), errors


def _raw_time(t):
    """An Avro schema (JSON) without the date/time/timestamp logical types, so fastavro
    returns their stored integers."""
    from .type_mapping import RAW_TIME_LOGICAL  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

    if isinstance(t, list):
        return [_raw_time(x) for x in t]
    if not isinstance(t, dict):
        return t
    t = dict(t)
    if t.get("logicalType") in RAW_TIME_LOGICAL:
        del t["logicalType"]
    if "fields" in t:
        t["fields"] = [dict(f, type=_raw_time(f["type"])) for f in t["fields"]]
    for key in ("items", "values", "type"):
        if isinstance(t.get(key), (dict, list)):
            t[key] = _raw_time(t[key])
    return t


def protobuf_file(ws):
    """The FileDescriptorProto of a registered Protobuf schema: a base64 serialized
    descriptor (what ``?format=serialized`` and the Python serializer give) or
    ``.proto`` text."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    text = ws.text.strip()
    try:
        fdp.ParseFromString(base64.b64decode(text, validate=True))
        if fdp.name or fdp.message_type:
            return fdp
    except Exception:   # not base64 or not a descriptor: .proto text
        pass
    from .proto_text import parse_proto  # lazy: each format loads its libraries (fastavro, protobuf, numpy) when used

    return parse_proto(text, name=f"schema-{ws.schema_id}.proto")


def _well_known(pool, name: str) -> bool:
    import importlib

    if not name.startswith("google/protobuf/"):
        return False
    mod = name[len("google/protobuf/"):-len(".proto")] + "_pb2"
    try:
        m = importlib.import_module(f"google.protobuf.{mod}")
    except ImportError:
        return False
    pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
    return True


class ProtobufGroupDecoder(GroupDecoder):
    label = "Protobuf"

    def __init__(self, ws, indexes: tuple[int, ...]):
        from google.protobuf import descriptor_pool, message_factory

        pool = descriptor_pool.DescriptorPool()
        refs = ws.all_references()
        added: set[str] = set()

        def add(fdp, refs_here):
            for dep in fdp.dependency:
                if dep in added:
                    continue
                added.add(dep)
                if dep in refs_here:
                    add(protobuf_file(refs_here[dep]), refs_here)
                elif not _well_known(pool, dep):
                    raise UnmappableSchema(f"protobuf import {dep!r}: not a reference of the schema")
            pool.Add(fdp)

        fdp = protobuf_file(ws)
        add(fdp, refs)
        fd = pool.FindFileByName(fdp.name)
        if not indexes or indexes[0] >= len(fdp.message_type):
            raise UnmappableSchema(f"message indexes {list(indexes)} name no message")
        desc = fd.message_types_by_name[fdp.message_type[indexes[0]].name]
        for i in indexes[1:]:
            if i >= len(desc.nested_types):
                raise UnmappableSchema(f"message indexes {list(indexes)} name no message")
            desc = desc.nested_types[i]
        self.cls = message_factory.GetMessageClass(desc)
        self.mapped = protobuf_mapping(desc)

    def decode_one(self, value: bytes, start: int):
        msg = self.cls()
        msg.ParseFromString(value[start:])
        return msg


class JsonGroupDecoder(GroupDecoder):
    label = "JSON"

    def __init__(self, ws):
        schema = json.loads(ws.text)
        refs = {name: json.loads(r.text) for name, r in ws.all_references().items()}
        self.mapped = json_schema_mapping(schema, refs)
        self.wrapped = not (isinstance(schema, dict) and (
            schema.get("properties") is not None and schema.get("type", "object") in (
                "object", ["object", "null"], ["null", "object"])))

    def decode_one(self, value: bytes, start: int):
        doc = json.loads(value[start:].decode("utf-8"))
        if self.wrapped:
            return {"value": doc}
        if not isinstance(doc, dict):
            raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
        return doc


@dataclass
class DecoderCache:
    """Group decoders by (schema id, message indexes), built once per process from
    the registry; a schema that cannot be fetched or mapped is remembered as its
    error text."""

    client: Any
    fmt: str
    decoders: dict = field(default_factory=dict)
    #: Avro: read Debezium's encodings but in the fields ``kept`` (:class:`AvroGroupDecoder`)
    debezium: bool = False
    kept: frozenset = frozenset()

    def get(self, sid: int, indexes: tuple[int, ...]):
        key = (sid, indexes)
        hit = self.decoders.get(key)
        if hit is None:
            hit = self._build(sid, indexes)
            self.decoders[key] = hit
        return hit

    def _build(self, sid: int, indexes: tuple[int, ...]):
        try:
            ws = self.client.schema(sid)
        except RegistryFetchError as exc:
            if exc.status is None or exc.status >= 500:
                raise   # the registry is down: fail the task (Spark retries), not the records
            return f"unknown schema id {sid}: {exc}"
        want = _REGISTRY_TYPE[self.fmt]
        if ws.schema_type != want:
            return f"schema id {sid} is {ws.schema_type}, the load expects {want}"
        try:
            if self.fmt == "avro":
                return AvroGroupDecoder(ws, debezium=self.debezium, kept=self.kept)
            if self.fmt == "protobuf":
                return ProtobufGroupDecoder(ws, indexes)
            return JsonGroupDecoder(ws)
        except (UnmappableSchema, ValueError, TypeError, KeyError) as exc:
            return f"schema id {sid} cannot be mapped to a table: {exc}"
        except Exception as exc:   # fastavro / protobuf schema errors of every kind
            return f"schema id {sid} cannot be parsed: {type(exc).__name__}: {exc}"


@dataclass
class Group:
    """The rows of one batch decoded with one writer schema: ``rows`` (positions in
    the batch), ``array`` (a struct array, one entry per row) and ``errors``."""

    schema_id: int | None
    indexes: tuple[int, ...]
    rows: list[int]
    array: Any
    errors: list


def _headers(values, failed: dict[int, str]):
    """Avro and JSON headers of a whole binary array at once (numpy over its
    buffers): ``({(id, ()): (rows, values, starts)}, tombstone rows)``; values
    without a header go to ``failed``."""
    import numpy as np
    import pyarrow as pa

    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    n = len(values)
    if n == 0:
        return {}, []
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + n + 1]
    data_buf = values.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    framed = valid & (lengths >= 5)
    safe = np.where(framed, starts, 0)
    if len(data):
        framed &= data[np.minimum(safe, len(data) - 1)] == 0
    ids = np.zeros(n, dtype=np.int64)
    for k in range(1, 5):
        ids = (ids << 8) | np.where(framed, data[np.minimum(safe + k, max(len(data) - 1, 0))]
                                    if len(data) else 0, 0)
    for r in np.nonzero(valid & ~framed)[0].tolist():
        failed[r] = "no schema registry header (magic byte 0 + 4-byte schema id)"
    tombstones = np.nonzero(~valid)[0].tolist()
    by_key: dict = {}
    framed_rows = np.nonzero(framed)[0]
    if len(framed_rows):
        fids = ids[framed_rows]
        for sid in np.unique(fids).tolist():
            rows = framed_rows[fids == sid]
            vals = values.take(pa.array(rows))
            by_key[(int(sid), ())] = (rows.tolist(), vals, [5] * len(vals))
    return by_key, tombstones


def decode_groups(values, cache: DecoderCache) -> tuple[list[Group], dict[int, str]]:
    """Decode an Arrow binary array of framed values. Returns the decoded groups
    (tombstones as a group with ``schema_id`` None and a null array) and
    ``{row: error}`` for rows that never reached a decoder (no header, unknown id)."""
    import pyarrow as pa

    fmt = cache.fmt
    by_key: dict[tuple, tuple[list, list, list]] = {}
    failed: dict[int, str] = {}
    tombstones: list[int] = []
    if fmt != "protobuf":
        by_key, tombstones = _headers(values, failed)
    for i, v in enumerate(values.to_pylist() if fmt == "protobuf" else ()):
        if v is None:
            tombstones.append(i)
            continue
        try:
            sid, idx, start = split_frame(v, fmt)
        except ValueError as exc:
            failed[i] = str(exc)
            continue
        rows, vals, starts = by_key.setdefault((sid, idx), ([], [], []))
        rows.append(i)
        vals.append(v)
        starts.append(start)
    groups: list[Group] = []
    for (sid, idx), (rows, vals, starts) in sorted(by_key.items()):
        dec = cache.get(sid, idx)
        if isinstance(dec, str):
            for r in rows:
                failed[r] = dec
            continue
        if isinstance(vals, list):
            arr, errors = dec.decode_many(vals, starts)
        elif hasattr(dec, "decode_array"):
            arr, errors = dec.decode_array(vals, starts)
        else:
            arr, errors = dec.decode_many(vals.to_pylist(), starts)
        groups.append(Group(sid, idx, rows, arr, errors))
    if tombstones:
        groups.append(Group(None, (), tombstones, pa.nulls(len(tombstones), pa.struct([])),
                            [None] * len(tombstones)))
    return groups, failed
