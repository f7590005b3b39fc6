"""Loads that follow a schema registry: decode by the id in each record's header,
evolve the table in the commit of the data.

Executors (:func:`registry_writer`): each task reads its splits, groups values by
schema id, decodes each group into one Arrow struct array
(:mod:`pipelines.decoding.schema_decoding`), checks each writer schema against the table
the load started from (:func:`pipelines.decoding.schema_evolution.merge_types`), and
writes good rows (the union of the accepted writer schemas, missing fields null)
and dead letters through the load's file writer. Its file descriptors carry the
schema ids it accepted and the reasons of those it refused.

Driver (:func:`write_registry_ranges`, :func:`commit_extras`): two writer schemas
of one load that contradict each other (both new to the table) are settled by
id, the lower (older) one winning, and the tasks run again with the loser refused
(rare: the first run's files stay invisible). The commit's schema is the table's
merged with every file's (``update_schema().union_by_name`` in the transaction of
the append), and the snapshot summary lists the ids (``kafkastore.schema-ids``).
``onIncompatible=fail`` stops the load before any
commit with one line naming the schema id and the field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from kafkastore.errors import IncompatibleSchemaError

from .executor_io import RAW_VALUE_COLUMN as _RAW_VALUE
from .executor_io import file_writer, split_reader
from ..decoding.schema_evolution import IncompatibleChange, merge_types, normalize
from ..warehouse.properties import KEY_SCHEMA_IDS_KEY, SCHEMA_IDS_KEY

KAFKA_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
INFO_DDL = "value_ids string, key_ids string, incompatible string"


@dataclass(frozen=True)
class RegistryPlan:
    """What the executors need (picklable): the registry client, formats, layout,
    the table's decoded types when the load started, and refused schema ids."""

    client: Any
    value_format: str
    key_format: str = "raw"
    flatten: bool = True
    keep_raw_value: bool = False
    table_value: Any = None    # struct type of the table's decoded columns
    table_key: Any = None      # the table's key column type (key decoding only)
    refused: Mapping[str, str] = field(default_factory=dict)   # "value:<sid>:<idx>" -> reason
    debezium: bool = False     # CDC: Debezium's encodings become their columns' types,
    kept: frozenset = frozenset()   # but in the columns a table holds as stored


def group_key(column: str, sid: int, idx: tuple) -> str:
    """How a writer schema (of the key or value column) is named in descriptors."""
    return f"{column}:{sid}:{'.'.join(map(str, idx))}"


def table_value_type(table_schema, flatten: bool, keep_raw_value: bool):
    """The struct type of the table's decoded columns in its current schema (pyarrow)."""
    import pyarrow as pa

    if table_schema is None:
        return pa.struct([])
    names = table_schema.names
    if flatten:
        skip = set(KAFKA_COLUMNS) | ({"value_raw"} if keep_raw_value else set())
        value = pa.struct([pa.field(f.name, normalize(f.type)) for f in table_schema
                           if f.name not in skip])
    else:
        value = normalize(table_schema.field("value").type) if "value" in names else pa.null()
    return value


def table_key_type(table_schema):
    """The table's ``key`` column type for key decoding (a raw binary key makes a
    decoded key incompatible); an empty struct when the table has no key yet."""
    import pyarrow as pa

    if table_schema is None or "key" not in table_schema.names:
        return pa.struct([])
    return normalize(table_schema.field("key").type)


def _refuse(col, late: set, groups: list, failed: dict) -> None:
    """Move the groups of writer schemas refused at settle time to the dead letters."""
    keep = []
    for g in groups:
        key = None if g.schema_id is None else group_key(col.name, g.schema_id, g.indexes)
        if key not in late:
            keep.append(g)
            continue
        for r, e in zip(g.rows, g.errors):
            failed[r] = e or col.incompatible[key]
    groups[:] = keep


class _Column:
    """One decoded column (value or key) of a task: its cache, accepted union type,
    accepted ids and refusal reasons."""

    def __init__(self, name: str, cache, table_type, refused: Mapping[str, str], clash=()):
        import pyarrow as pa

        self.name = name
        self.cache = cache
        self.table_type = table_type
        self.refused = refused
        self.clash = set(clash)
        self.union = pa.struct([])
        self.accepted: set[str] = set()
        self.verdicts: dict[str, str | None] = {}
        self.incompatible: dict[str, str] = {}
        self.types: dict[str, tuple] = {}

    def settle(self) -> set[str]:
        """The task's union type over its accepted writer schemas, oldest id first; a
        schema contradicting an older one (both new to the table) is refused. Returns
        the keys refused here (their rows become dead letters)."""
        late = set()
        for key in sorted(self.types, key=lambda k: (self.types[k][0], self.types[k][1])):
            sid, _, arrow = self.types[key]
            try:
                self.union = merge_types(self.union, arrow, "")
            except IncompatibleChange as exc:
                reason = (f"schema id {sid} contradicts an older schema loaded in the same "
                          f"run: {exc}")
                self.accepted.discard(key)
                self.incompatible[key] = self.verdicts[key] = reason
                late.add(key)
        return late

    def verdict(self, sid: int, idx: tuple, arrow) -> str | None:
        """None if rows of this writer schema are accepted, else the reason."""
        key = group_key(self.name, sid, idx)
        if key in self.verdicts:
            return self.verdicts[key]
        reason = self.refused.get(key)
        if reason is None:
            try:
                bad = sorted(self.clash & {arrow.field(i).name for i in range(arrow.num_fields)}
                             ) if self.clash else []
                if bad:
                    raise IncompatibleChange(
                        f"field(s) {bad} clash with the table's Kafka columns (load with "
                        f"flatten=false to keep the value as a struct)")
                merge_types(self.table_type, arrow, "" if self.name == "value" else "key")
            except IncompatibleChange as exc:
                reason = f"schema id {sid} is incompatible with table: {exc}"
        if reason is None:
            self.accepted.add(key)
            self.types[key] = (sid, idx, arrow)
        else:
            self.incompatible[key] = reason
        self.verdicts[key] = reason
        return reason

    def decode(self, values):
        """``(groups, row errors)`` of one batch's column; refused groups' rows get
        their reason."""
        from ..decoding.schema_decoding import decode_groups  # lazy: registry loads only (fastavro, protobuf)

        groups, failed = decode_groups(values, self.cache)
        kept = []
        for g in groups:
            if g.schema_id is None:
                kept.append(g)
                continue
            idx = _group_idx(g)
            reason = self.verdict(g.schema_id, idx, g.array.type)
            if reason is not None:
                for r, e in zip(g.rows, g.errors):
                    failed[r] = e or reason
                continue
            if any(g.errors):
                for r, e in zip(g.rows, g.errors):
                    if e:
                        failed[r] = e
            kept.append(g)
        return kept, failed

    def assemble(self, n: int, groups, failed: Mapping[int, str]):
        """One array of ``n`` rows in batch order, of this task's union type."""
        import numpy as np
        import pyarrow as pa

        target = self.union
        parts, order = [], []
        for g in groups:
            if g.schema_id is None or pa.types.is_null(target):
                parts.append(pa.nulls(len(g.rows), target))
            else:
                parts.append(g.array.cast(target) if g.array.type != target else g.array)
            order.extend(g.rows)   # noqa: PERF401
        order = np.asarray(order, dtype=np.int64)
        rest = np.setdiff1d(np.arange(n, dtype=np.int64), order, assume_unique=True)
        if len(rest):
            parts.append(pa.nulls(len(rest), target))
            order = np.concatenate([order, rest])
        arr = pa.concat_arrays(parts) if parts else pa.nulls(0, target)
        if len(order) == n and (order == np.arange(n)).all():
            return arr
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
        return arr.take(pa.array(inverse))


def _group_idx(g) -> tuple:
    return g.indexes


def _decoders(plan: RegistryPlan, fmt: str):
    """A :class:`pipelines.decoding.schema_decoding.DecoderCache` of ``fmt`` for ``plan``."""
    from ..decoding.schema_decoding import DecoderCache  # lazy: registry loads only (fastavro, protobuf)

    return DecoderCache(plan.client, fmt, debezium=plan.debezium, kept=plan.kept)


def registry_writer(plan: RegistryPlan, write):
    """The ``mapInArrow`` function of a registry load over Kafka-schema batches:
    ``write`` is the load's file writer (batches with ``__dl_value`` and
    ``__error``); yields its descriptors plus :data:`INFO_DDL` columns."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        clash = set(KAFKA_COLUMNS) | ({"value_raw"} if plan.keep_raw_value else set())
        value = _Column("value", _decoders(plan, plan.value_format), plan.table_value,
                        plan.refused, clash if plan.flatten else ())
        key = None
        if plan.key_format != "raw":
            key = _Column("key", _decoders(plan, plan.key_format), plan.table_key,
                          plan.refused)
        pending = []
        for batch in batches:
            if not batch.num_rows:
                continue
            vg, vf = value.decode(batch.column("value"))
            kg, kf = key.decode(batch.column("key")) if key is not None else ([], {})
            pending.append((batch, vg, vf, kg, kf))
        for col, g_at in ((value, 1), (key, 3)):
            if col is None:
                continue
            late = col.settle()
            if late:
                for item in pending:
                    _refuse(col, late, item[g_at], item[g_at + 1])

        def out() -> Iterator[Any]:
            for batch, vg, vf, kg, kf in pending:
                n = batch.num_rows
                errors = None
                if vf or kf:
                    errors = [vf.get(i) or (f"key: {kf[i]}" if i in kf else None)
                              for i in range(n)]
                varr = value.assemble(n, vg, vf)
                cols, names = [], []
                for name in batch.schema.names:
                    if name == "value":
                        continue
                    if name == "key" and key is not None:
                        if not key.union.num_fields:
                            continue   # no key decoded yet: no column (Parquet has no empty struct)
                        cols.append(key.assemble(n, kg, kf))
                    else:
                        cols.append(batch.column(name))
                    names.append(name)
                if plan.keep_raw_value:
                    cols.append(batch.column("value"))
                    names.append("value_raw")
                if plan.flatten:
                    for f, child in zip(varr.type, varr.flatten()):
                        cols.append(child)
                        names.append(f.name)
                elif varr.type.num_fields:
                    cols.append(varr)
                    names.append("value")
                cols += [batch.column("value"), pa.array(errors, pa.string()) if errors
                         else pa.nulls(n, pa.string())]
                names += [_RAW_VALUE, "__error"]
                out_batch = pa.RecordBatch.from_arrays(cols, names=names)
                if key is None or not errors:
                    yield out_batch
                    continue
                # Dead letters keep the raw key (the dead-letter table's key is bytes):
                # good and bad rows go to the writer as separate batches.
                import pyarrow.compute as pc

                bad = pc.is_valid(out_batch.column("__error"))
                yield out_batch.filter(pc.invert(bad))
                at = out_batch.schema.get_field_index("key")
                raw = (out_batch.set_column(at, "key", batch.column("key")) if at >= 0
                       else out_batch.append_column("key", batch.column("key")))
                yield raw.filter(bad)

        for desc in write(out()):
            # The writer yields only after consuming every batch: the verdicts are final.
            n = desc.num_rows
            refused = {**value.incompatible, **(key.incompatible if key is not None else {})}
            keys = sorted(key.accepted) if key is not None else []
            yield desc.append_column("value_ids", pa.array([json.dumps(sorted(value.accepted))] * n)) \
                .append_column("key_ids", pa.array([json.dumps(keys)] * n)) \
                .append_column("incompatible", pa.array([json.dumps(refused)] * n))

    return run


def _ids(files, column: str) -> set[str]:
    out: set[str] = set()
    for f in files:
        out.update(json.loads(f.get(f"{column}_ids") or "[]"))
    return out


def conflicts(plan: RegistryPlan, files) -> dict[str, str]:
    """Writer schemas accepted by different tasks that contradict each other: the
    higher id of a contradicting pair is refused (``{group key: reason}``)."""
    out: dict[str, str] = {}
    for column, fmt, start in (("value", plan.value_format, plan.table_value),
                               ("key", plan.key_format, plan.table_key)):
        if fmt == "raw":
            continue
        cache = _decoders(plan, fmt)
        union = start
        for gk in sorted(_ids(files, column), key=lambda k: (int(k.split(":")[1]), k)):
            _, sid, idx = gk.split(":")
            dec = cache.get(int(sid), tuple(int(i) for i in idx.split(".") if i))
            if isinstance(dec, str):
                continue
            try:
                union = merge_types(union, dec.arrow, "" if column == "value" else "key")
            except IncompatibleChange as exc:
                out[gk] = (f"schema id {sid} contradicts an older schema loaded in the same "
                           f"run: {exc}")
    return out


def write_registry_ranges(spark, splits, plan: RegistryPlan, read, make_writer, on_incompatible):
    """Run the registry load's tasks over ``splits`` (``read``: the split reader,
    ``make_writer()``: a fresh file writer) and return the file descriptors."""
    from ..warehouse.files import DESCRIPTOR_DDL  # lazy: registry loads only (fastavro, protobuf)

    for _ in range(3):
        fn = registry_writer(plan, make_writer())

        def run(batches, fn=fn):
            yield from fn(read(batches))

        rows = spark.range(0, len(splits), 1, len(splits)).mapInArrow(
            run, DESCRIPTOR_DDL + ", " + INFO_DDL).collect()
        files = [r.asDict() for r in rows]
        bad = conflicts(plan, files)
        if not bad:
            return files
        if on_incompatible == "fail":
            raise IncompatibleSchemaError(
                f"{next(iter(bad.values()))} (nothing committed; --on-incompatible dead-letter "
                f"sends such records to the dead letters)")
        plan = RegistryPlan(**{**plan.__dict__, "refused": {**plan.refused, **bad}})
    return files


@dataclass
class CommitExtras:
    """The schema and snapshot properties a registry load commits with."""

    schema: Any
    properties: dict[str, str]


def commit_extras(files, table_schema, on_incompatible: str,
                  key_decoded: bool = False) -> CommitExtras:
    """The commit's schema (the table's merged with every data file's) and summary
    properties; :class:`IncompatibleSchemaError` for ``onIncompatible=fail`` when
    any task refused a writer schema (before anything is committed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if on_incompatible == "fail":
        for f in files:
            refused = json.loads(f.get("incompatible") or "{}")
            if refused:
                raise IncompatibleSchemaError(
                    f"{sorted(refused.values())[0].splitlines()[0]} (nothing committed; "
                    f"--on-incompatible dead-letter sends such records to the dead letters)")
    merged = pa.struct([pa.field(f.name, normalize(f.type)) for f in table_schema]) \
        if table_schema is not None else pa.struct([])
    for f in files:
        if f["kind"] != "data" or not f.get("footer"):
            continue
        fs = pq.read_metadata(pa.BufferReader(f["footer"])).schema.to_arrow_schema()
        merged = merge_types(merged, pa.struct([pa.field(x.name, normalize(x.type)) for x in fs]),
                             "")
    schema = pa.schema([merged.field(i) for i in range(merged.num_fields)])
    props = {SCHEMA_IDS_KEY: json.dumps(sorted({int(k.split(":")[1]) for k in _ids(files, "value")}))}
    if key_decoded:
        props[KEY_SCHEMA_IDS_KEY] = json.dumps(sorted({int(k.split(":")[1])
                                                       for k in _ids(files, "key")}))
    return CommitExtras(schema, props)


def load_files(spark, root: str, splits, opts, target, run_id: str, table_schema, *,
               storage_options=None, counter=None, cdc: str | None = None) -> list[dict]:
    """The registry load's part of :func:`pipelines.jobs.write_engine.write_ranges`: ``opts`` are
    the load's :class:`pipelines.decoding.DecodeOptions`; returns the descriptors.
    ``cdc="debezium"``: the values are Debezium Envelopes, written as change rows
    (:func:`pipelines.decoding.cdc.debezium_batch`)."""
    from ..decoding.debezium_types import stored_columns  # lazy: registry loads only (fastavro, protobuf)
    from ..decoding.registry_client import RegistryClient  # lazy: registry loads only (fastavro, protobuf)

    table_value = table_value_type(table_schema, opts.flatten, opts.keep_raw_value)
    if cdc:
        from ..decoding.cdc import registry_table_value  # lazy: registry loads only (fastavro, protobuf)

        table_value = registry_table_value(table_schema, KAFKA_COLUMNS)
    plan = RegistryPlan(client=RegistryClient(opts.schema_registry),
                        value_format=opts.value_format, key_format=opts.key_format,
                        flatten=opts.flatten, keep_raw_value=opts.keep_raw_value,
                        table_value=table_value, table_key=table_key_type(table_schema),
                        debezium=cdc == "debezium", kept=stored_columns(table_schema)
                        if cdc == "debezium" else frozenset())
    read = split_reader(root, storage_options, splits)

    def make_writer():
        write = file_writer(target, run_id=run_id, split_dead_letters=True, counter=counter)
        if cdc:
            from ..decoding.cdc import debezium_writer  # lazy: registry loads only (fastavro, protobuf)

            return debezium_writer(write, KAFKA_COLUMNS, _RAW_VALUE, "__error")
        return write

    return write_registry_ranges(spark, splits, plan, read, make_writer, opts.on_incompatible)
