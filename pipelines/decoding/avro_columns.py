"""Avro bodies to Arrow columns without a Python object per value.

All values of a group share one writer schema, so they can be read in lockstep:
field by field, each step a numpy operation over every value's current position
(a varint for all values at once, a string's bytes gathered for all values at
once). Unions read their branch index and then each branch for the values that
took it. This covers records, primitives, enums, fixed, unions and the
date/time/timestamp logical types; a schema with arrays, maps, decimals or
recursion is left to fastavro (:func:`supported` says which).

Any sign of a bad value (a varint longer than 10 bytes, a negative length, an
enum index out of range, invalid UTF-8, a value not consumed exactly) makes
:func:`decode` return None: the caller then decodes the group value by value,
which names the bad ones.
"""
from __future__ import annotations

_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


class _Bad(Exception):
    """A value that does not decode: the group falls back to value-by-value decoding."""


def _resolve(t, names: dict, ns):
    if isinstance(t, str) and t not in _PRIMITIVE:
        full = t if ("." in t or not ns) else f"{ns}.{t}"
        if full in names:
            return names[full], full.rsplit(".", 1)[0] if "." in full else None
        if t in names:
            return names[t], t.rsplit(".", 1)[0] if "." in t else None
        raise _Bad(f"unknown type {t}")
    return t, ns


def supported(schema, names: dict | None = None, ns=None, stack=()) -> bool:
    """Whether :func:`decode` can read ``schema`` (Avro JSON, named types registered in
    ``names`` as a side effect)."""
    names = {} if names is None else names
    try:
        return _supported(schema, names, ns, stack)
    except (_Bad, KeyError, TypeError):
        return False


def _full(t: dict, ns):
    name = t["name"]
    ns2 = t.get("namespace", ns)
    return name if "." in name or not ns2 else f"{ns2}.{name}"


def _supported(t, names, ns, stack) -> bool:
    if isinstance(t, str):
        if t in _PRIMITIVE:
            return True
        r, rns = _resolve(t, names, ns)
        full = _full(r, rns) if isinstance(r, dict) and "name" in r else t
        if full in stack:
            return False
        return _supported(r, names, rns, stack)
    if isinstance(t, list):
        return all(_supported(b, names, ns, stack) for b in t)
    kind = t.get("type")
    logical = t.get("logicalType")
    if logical == "decimal":
        return False
    if kind == "record":
        full = _full(t, ns)
        names[full] = t
        inner = full.rsplit(".", 1)[0] if "." in full else None
        return all(_supported(f["type"], names, inner, stack + (full,)) for f in t["fields"])
    if kind in ("enum", "fixed"):
        names[_full(t, ns)] = t
        return True
    if kind in ("array", "map"):
        return False
    if isinstance(kind, (str, list, dict)):
        return _supported(kind, names, ns, stack)
    return False


def decode(schema, names: dict, arrow_type, data: bytes, starts, ends):
    """A struct array of ``arrow_type`` (the raw-time mapping of ``schema``, see
    :func:`pipelines.decoding.type_mapping.avro_mapping`) from the bodies at ``data[starts[i]:
    ends[i]]``, or None if any body does not decode cleanly."""
    import numpy as np
    import pyarrow as pa

    buf = np.frombuffer(data + b"\x00" * 16, dtype=np.uint8)
    pos = np.asarray(starts, dtype=np.int64).copy()
    ctx = _Ctx(buf, names)
    try:
        if isinstance(schema, dict) and schema.get("type") == "record":
            arr = ctx.read(schema, pos, arrow_type, None)
        else:
            child = ctx.read(schema, pos, arrow_type.field(0).type, None)
            arr = pa.StructArray.from_arrays([child], fields=[arrow_type.field(0)])
    except (_Bad, pa.ArrowInvalid, ValueError, IndexError, OverflowError):
        return None
    if not np.array_equal(pos, np.asarray(ends, dtype=np.int64)):
        return None
    return arr


class _Ctx:
    def __init__(self, buf, names):
        import numpy as np

        import pyarrow as pa

        self.buf = buf
        self.data = pa.py_buffer(buf)
        self.names = names
        self.np = np
        self.k10 = np.arange(10, dtype=np.int64)
        self.shift = (7 * np.arange(10, dtype=np.uint64)).astype(np.uint64)

    def varint(self, pos):
        """Zigzag longs at ``pos`` (advanced in place): one step per byte length, each
        over the values whose varint is still going."""
        np = self.np
        m = len(pos)
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        if pos.max() + 10 > len(self.buf):
            raise _Bad("past the end")
        raw = np.zeros(m, dtype=np.uint64)
        active = None   # None: every value
        for k in range(10):
            at = pos + k if active is None else pos[active] + k
            b = self.buf[at].astype(np.uint64)
            part = (b & np.uint64(0x7F)) << np.uint64(7 * k)
            if active is None:
                raw |= part
            else:
                raw[active] |= part
            cont = b >= 128
            if active is None:
                if not cont.any():
                    pos += 1
                    break
                pos[~cont] += 1
                active = np.nonzero(cont)[0]
            else:
                done = active[~cont]
                pos[done] += k + 1
                active = active[cont]
                if not len(active):
                    break
        else:
            raise _Bad("varint longer than 10 bytes")
        return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)

    def fixed_bytes(self, pos, size: int):
        np = self.np
        if len(pos) and pos.max() + size > len(self.buf):
            raise _Bad("past the end")
        out = self.buf[pos[:, None] + np.arange(size, dtype=np.int64)]
        pos += size
        return out

    def binary(self, pos, lengths, string: bool):
        """The byte strings at ``pos`` of ``lengths``: one Arrow ``take`` of the even
        elements of an array whose offsets alternate string start / string end over
        the whole buffer (values are laid out in order, so the offsets never decrease)."""
        np = self.np
        import pyarrow as pa

        n = len(pos)
        if (lengths < 0).any():
            raise _Bad("negative length")
        if n and (pos + lengths).max() > len(self.buf) - 16:
            raise _Bad("past the end")
        if n == 0:
            return pa.array([], pa.string() if string else pa.binary())
        offs = np.empty(2 * n, dtype=np.int64)
        offs[0::2] = pos
        offs[1::2] = pos + lengths
        if (np.diff(offs) < 0).any():
            raise _Bad("values out of order")
        spans = pa.Array.from_buffers(pa.large_binary(), 2 * n - 1,
                                      [None, pa.py_buffer(offs), self.data])
        arr = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
        pos += lengths
        if string:
            return arr.cast(pa.large_string()).cast(pa.string())   # invalid UTF-8 raises
        return arr.cast(pa.binary())

    def read(self, t, pos, arrow_type, ns):
        """An array of ``arrow_type``, one value per position."""
        np = self.np
        import pyarrow as pa

        if isinstance(t, str) and t not in _PRIMITIVE:
            t, ns = _resolve(t, self.names, ns)
        if isinstance(t, list):
            return self.union(t, pos, arrow_type, ns)
        kind = t if isinstance(t, str) else t.get("type")
        if isinstance(kind, (list, dict)):
            return self.read(kind, pos, arrow_type, ns)
        if kind == "record":
            full = _full(t, ns)
            inner = full.rsplit(".", 1)[0] if "." in full else None
            children, fields = [], []
            by_name = {arrow_type.field(i).name: arrow_type.field(i)
                       for i in range(arrow_type.num_fields)}
            for f in t["fields"]:
                if f["name"] in by_name:
                    fld = by_name[f["name"]]
                    children.append(self.read(f["type"], pos, fld.type, inner))
                    fields.append(fld)
                else:   # a null-only field: no column, nothing stored
                    self.read(f["type"], pos, pa.null(), inner)
            order = [fields.index(by_name[arrow_type.field(i).name])
                     for i in range(arrow_type.num_fields)]
            return pa.StructArray.from_arrays([children[i] for i in order],
                                              fields=[fields[i] for i in order])
        if kind == "null":
            return pa.nulls(len(pos), arrow_type)
        if kind == "boolean":
            v = self.fixed_bytes(pos, 1)[:, 0]
            if (v > 1).any():
                raise _Bad("boolean byte not 0 or 1")
            return pa.array(v.astype(bool), type=pa.bool_())
        if kind in ("int", "long"):
            v = self.varint(pos)
            if kind == "int" and len(v) and ((v < -(1 << 31)).any() or (v >= (1 << 31)).any()):
                raise _Bad("int out of range")
            if pa.types.is_integer(arrow_type):
                return pa.array(v.astype(arrow_type.to_pandas_dtype()), type=arrow_type)
            # dates, times, timestamps: their stored integers in the raw-time type's unit
            storage = pa.int32() if arrow_type.bit_width == 32 else pa.int64()
            return pa.array(v.astype(storage.to_pandas_dtype()), type=storage).view(arrow_type)
        if kind == "float":
            return pa.array(self.fixed_bytes(pos, 4).copy().view("<f4").ravel(), type=pa.float32())
        if kind == "double":
            return pa.array(self.fixed_bytes(pos, 8).copy().view("<f8").ravel(), type=pa.float64())
        if kind in ("bytes", "string"):
            lengths = self.varint(pos)
            return self.binary(pos, lengths, string=pa.types.is_string(arrow_type))
        if kind == "fixed":
            size = int(t["size"])
            return self.binary(pos, np.full(len(pos), size, dtype=np.int64), string=False)
        if kind == "enum":
            idx = self.varint(pos)
            symbols = t["symbols"]
            if len(idx) and ((idx < 0).any() or (idx >= len(symbols)).any()):
                raise _Bad("enum index out of range")
            return pa.array(symbols, pa.string()).take(pa.array(idx))
        raise _Bad(f"unsupported {kind}")

    def union(self, branches, pos, arrow_type, ns):
        np = self.np
        import pyarrow as pa

        which = self.varint(pos)
        if len(which) and ((which < 0).any() or (which >= len(branches)).any()):
            raise _Bad("union branch out of range")
        non_null = [i for i, b in enumerate(branches) if b != "null"]
        if len(non_null) <= 1:
            if not non_null:
                return pa.nulls(len(pos), arrow_type)
            return self._branch(branches[non_null[0]], non_null[0], which, pos, arrow_type, ns)
        children = []
        for k, i in enumerate(non_null):
            fld = arrow_type.field(k)
            children.append(self._branch(branches[i], i, which, pos, fld.type, ns))
        mask = pa.array(np.isin(which, [i for i, b in enumerate(branches) if b == "null"]))
        return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)

    def _branch(self, branch, i, which, pos, arrow_type, ns):
        """The values of rows that took branch ``i``, null elsewhere."""
        np = self.np
        import pyarrow as pa

        rows = np.nonzero(which == i)[0]
        n = len(pos)
        if len(rows) == n:
            return self.read(branch, pos, arrow_type, ns)
        sub = pos[rows]
        values = self.read(branch, sub, arrow_type, ns)
        pos[rows] = sub
        index = np.full(n, len(rows), dtype=np.int64)
        index[rows] = np.arange(len(rows), dtype=np.int64)
        padded = pa.concat_arrays([values, pa.nulls(1, arrow_type)])
        return padded.take(pa.array(index))
