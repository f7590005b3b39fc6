"""What the executors run for a job that writes a table: read log splits
(:func:`split_reader`, the data source's own reader) and write Parquet files
(:func:`file_writer`, one descriptor per file, nothing committed), told where and how by
a :class:`WriteTarget`.

The driver's side (planning the splits, the Spark frames, the progress line, the
written files) is :mod:`pipelines.jobs.write_engine`; loads, reprocesses, upserts and
registry loads all write through these two.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

from kafkastore.read.reader import READ_COMMITTED, read_range
from kafkastore.storage import Storage

from ..decoding.values import DEAD_LETTER_COLUMNS, json_error_detail
from ..spec.table_layout import TOMBSTONE, TableLayout
from ..warehouse.files import descriptor_schema, timestamp_zones, write_files
from .upsert import last_per_partition

RAW_VALUE_COLUMN = "__dl_value"   # the raw value kept next to decoded columns, for dead letters


def split_reader(root: str, storage_options: dict | None, splits: list[tuple],
                 include_headers: bool = True):
    """For ``mapInArrow`` over a frame of split numbers: the Kafka-schema Arrow
    batches of each split, read on the executor (the data source's own reader)."""
    def read(batches: Iterator[Any]) -> Iterator[Any]:
        storage = Storage(root, storage_options)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                for rr in splits[i]:
                    # The range is read for this decode only: values may be decoded
                    # into the read buffer (see DECISIONS "Cold decodes").
                    rb = read_range(storage, rr, include_headers=include_headers,
                                    isolation=READ_COMMITTED, reuse_input=True)
                    if rb.num_rows:
                        yield rb

    return read


@dataclass(frozen=True)
class WriteTarget:
    """Where and how the executors write: table locations (plain strings) and the
    table's layout. An upsert layout stages: each task keeps the last record per key
    and partition, with a column telling tombstones (null raw value) apart."""

    data_location: str
    dead_letter_location: str | None = None
    layout: TableLayout = TableLayout()
    storage_options: Mapping[str, Any] | None = None
    dead_letters_from: Mapping[int, int] = field(default_factory=dict)
    #: ``{column: has a zone}`` of the data table's timestamp columns: the files keep
    #: a column's kind (:func:`pipelines.warehouse.files.micros_timestamps`).
    timestamp_zones: Mapping[str, bool] = field(default_factory=dict)

    def of_table(self, tbl) -> "WriteTarget":
        """This target writing timestamps as the columns of ``tbl`` (an Iceberg table) are."""
        return replace(self, timestamp_zones=timestamp_zones(tbl.schema()))


def file_writer(target: WriteTarget, *, run_id: str, split_dead_letters: bool,
                json_schema: str | None = None, counter=None):
    """The ``mapInArrow`` function of a load: write each task's rows as Parquet
    (data and, when ``split_dead_letters``, dead letters at or after
    ``target.dead_letters_from`` of their partition) and yield one descriptor per
    file. ``counter`` is an optional accumulator of ``{partition: rows}``."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        so = dict(target.storage_options or {})
        layout = target.layout
        good: list = []
        dead: list = []
        rows = 0
        descriptors: list[dict] = []
        seen: dict[int, int] = {}

        def flush():
            nonlocal good, dead, rows
            if good and layout.upsert:
                # Upsert staging: only the last record per (key, partition) of this task
                # can win (pipelines.jobs.upsert), so only those are staged.
                good = last_per_partition(pa.Table.from_batches(good), layout.upsert_keys)
            if good:
                descriptors.extend(write_files(
                    target.data_location, good, run_id=run_id, layout=layout, storage_options=so,
                    zoned=target.timestamp_zones))
            if dead:
                descriptors.extend(write_files(
                    target.dead_letter_location, dead, run_id=run_id,
                    layout=layout.dead_letters(), storage_options=so, kind="dead_letter"))
            good, dead, rows = [], [], 0

        for batch in batches:
            if not batch.num_rows:
                continue
            batch = _restore_null_headers(batch)
            for p, n in zip(*_value_counts(batch.column("partition"))):
                seen[p] = seen.get(p, 0) + n
            if layout.upsert:
                raw = batch.column(RAW_VALUE_COLUMN if split_dead_letters else "value")
                batch = batch.append_column(TOMBSTONE, pc.is_null(raw))
            if split_dead_letters:
                failed = pc.is_valid(batch.column("__error"))
                ok = batch.filter(pc.invert(failed))
                bad = batch.filter(failed)
                if ok.num_rows:
                    good.append(ok.drop_columns([RAW_VALUE_COLUMN, "__error"]))
                if bad.num_rows and target.dead_letters_from:
                    # Dead letters the dead-letter table already committed (a crash
                    # between its commit and the table's) are not written again.
                    low = pa.array([target.dead_letters_from.get(p, 0)
                                    for p in bad.column("partition").to_pylist()], pa.int64())
                    bad = bad.filter(pc.greater_equal(bad.column("offset"), low))
                if bad.num_rows:
                    dead.append(_dead_letter_batch(bad, json_schema, json_error_detail,
                                                   DEAD_LETTER_COLUMNS, pa))
            else:
                good.append(batch)
            rows += batch.num_rows
            if rows >= layout.max_rows_per_file:
                flush()
        flush()
        if counter is not None and seen:
            counter.add(seen)
        if descriptors:
            yield pa.RecordBatch.from_pylist(descriptors, schema=descriptor_schema())

    return run


def _dead_letter_batch(bad, json_schema, json_error_detail, columns, pa):
    """Dead-letter rows: the Kafka columns, the raw value and the error text."""
    errors = bad.column("__error").to_pylist()
    if json_schema is not None:
        # Spark's parser only says "does not match"; say why, for failed rows only.
        values = bad.column(RAW_VALUE_COLUMN).to_pylist()
        errors = [json_error_detail(v, json_schema) or e for v, e in zip(values, errors)]
    arrays, names = [], []
    for name in columns:
        if name == "error":
            arrays.append(pa.array(errors, pa.string()))
        elif name == "value":
            arrays.append(bad.column(RAW_VALUE_COLUMN))
        elif name in bad.schema.names:
            arrays.append(bad.column(name))
        else:
            continue
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _value_counts(column):
    import pyarrow.compute as pc

    counts = pc.value_counts(column)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


def _restore_null_headers(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    i = batch.schema.get_field_index("headers")
    if i < 0:
        return batch
    h = batch.column(i)
    empty = pc.equal(pc.list_value_length(h), 0)
    if not pc.any(empty).as_py():
        return batch
    return batch.set_column(i, batch.schema.field(i), pc.if_else(empty, pa.nulls(len(h), h.type), h))
