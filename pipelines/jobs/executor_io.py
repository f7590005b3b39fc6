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
from typing import Any, Iterator, Mapping, Sequence

from kafkastore.read.reader import READ_COMMITTED, read_range
from kafkastore.storage import Storage

from ..decoding.values import DEAD_LETTER_COLUMNS, json_error_detail
from ..spec.route_filter import RouteFilter
from ..spec.table_layout import TOMBSTONE, TableLayout
from ..warehouse.files import DESCRIPTOR_DDL, descriptor_schema, timestamp_zones, write_files
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
    and partition, with a column telling tombstones (null raw value) apart.

    A target of a load of many tables in one pass (:func:`routed_writer`) also says which
    rows are its own: ``route`` (the rows of its route value, or with ``others`` every
    row no listed value takes, dead letters included) at or after ``rows_from`` of their
    partition (where the table's range starts; a partition the table has no range of
    gives it no row)."""

    data_location: str
    dead_letter_location: str | None = None
    layout: TableLayout = TableLayout()
    storage_options: Mapping[str, Any] | None = None
    dead_letters_from: Mapping[int, int] = field(default_factory=dict)
    #: ``{column: has a zone}`` of the data table's timestamp columns: the files keep
    #: a column's kind (:func:`pipelines.warehouse.files.micros_timestamps`).
    timestamp_zones: Mapping[str, bool] = field(default_factory=dict)
    route: RouteFilter | None = None
    #: None: every row; else the rows at or after the offset of their partition (none of
    #: a partition it does not name).
    rows_from: Mapping[int, int] | None = None

    def of_table(self, tbl) -> "WriteTarget":
        """This target writing timestamps as the columns of ``tbl`` (an Iceberg table) are."""
        return replace(self, timestamp_zones=timestamp_zones(tbl.schema()))


class TargetFiles:
    """One task's Parquet files of one :class:`WriteTarget`: rows are added batch by batch
    (:meth:`add`), written every ``layout.max_rows_per_file`` rows and at :meth:`finish`,
    which returns the descriptors of the files written."""

    def __init__(self, target: WriteTarget, *, run_id: str, split_dead_letters: bool,
                 json_schema: str | None = None):
        self.target, self.run_id = target, run_id
        self.split_dead_letters, self.json_schema = split_dead_letters, json_schema
        self.good: list = []
        self.dead: list = []
        self.rows = 0
        self.descriptors: list[dict] = []

    def add(self, batch) -> None:
        """Take one Arrow batch of the target's rows (decoded columns, with ``__error`` and
        the raw value when dead letters are split off)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        target, layout = self.target, self.target.layout
        if not batch.num_rows:
            return
        if layout.upsert:
            raw = batch.column(RAW_VALUE_COLUMN if self.split_dead_letters else "value")
            batch = batch.append_column(TOMBSTONE, pc.is_null(raw))
        if self.split_dead_letters:
            failed = pc.is_valid(batch.column("__error"))
            ok = batch.filter(pc.invert(failed))
            bad = batch.filter(failed)
            if ok.num_rows:
                self.good.append(ok.drop_columns([RAW_VALUE_COLUMN, "__error"]))
            if bad.num_rows and target.dead_letters_from:
                # Dead letters the dead-letter table already committed (a crash
                # between its commit and the table's) are not written again.
                bad = bad.filter(pc.greater_equal(
                    bad.column("offset"), _floors(bad, target.dead_letters_from, pa)))
            if bad.num_rows:
                self.dead.append(_dead_letter_batch(bad, self.json_schema, json_error_detail,
                                                    DEAD_LETTER_COLUMNS, pa))
        else:
            self.good.append(batch)
        self.rows += batch.num_rows
        if self.rows >= layout.max_rows_per_file:
            self._flush()

    def finish(self) -> list[dict]:
        """Write what is left; the descriptors of every file written."""
        self._flush()
        return self.descriptors

    def _flush(self) -> None:
        import pyarrow as pa

        target, layout = self.target, self.target.layout
        so = dict(target.storage_options or {})
        good = self.good
        if good and layout.upsert:
            # Upsert staging: only the last record per (key, partition) of this task
            # can win (pipelines.jobs.upsert), so only those are staged.
            good = last_per_partition(pa.Table.from_batches(good), layout.upsert_keys)
        if good:
            self.descriptors.extend(write_files(
                target.data_location, good, run_id=self.run_id, layout=layout,
                storage_options=so, zoned=target.timestamp_zones))
        if self.dead:
            self.descriptors.extend(write_files(
                target.dead_letter_location, self.dead, run_id=self.run_id,
                layout=layout.dead_letters(), storage_options=so, kind="dead_letter"))
        self.good, self.dead, self.rows = [], [], 0


def file_writer(target: WriteTarget, *, run_id: str, split_dead_letters: bool,
                json_schema: str | None = None, counter=None):
    """The ``mapInArrow`` function of a load: write each task's rows as Parquet
    (data and, when ``split_dead_letters``, dead letters at or after
    ``target.dead_letters_from`` of their partition) and yield one descriptor per
    file. ``counter`` is an optional accumulator of ``{partition: rows}``."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        files = TargetFiles(target, run_id=run_id, split_dead_letters=split_dead_letters,
                            json_schema=json_schema)
        seen: dict[int, int] = {}
        for batch in batches:
            if batch.num_rows:
                batch = _restore_null_headers(batch)
                _count_partitions(batch, seen)
                files.add(batch)
        descriptors = files.finish()
        if counter is not None and seen:
            counter.add(seen)
        if descriptors:
            yield pa.RecordBatch.from_pylist(descriptors, schema=descriptor_schema())

    return run


#: The column a routed pass carries each row's route value in (null: a null value or a
#: record that did not decode), computed by Spark as the route field cast to a string.
ROUTE_COLUMN = "__route"
#: What :func:`routed_writer` yields: a file descriptor and the index of its target.
ROUTED_DESCRIPTOR_DDL = DESCRIPTOR_DDL + ", target int"


def routed_descriptor_schema():
    """The Arrow schema of :data:`ROUTED_DESCRIPTOR_DDL`."""
    import pyarrow as pa

    return descriptor_schema().append(pa.field("target", pa.int32()))


def routed_writer(targets: Sequence[tuple[WriteTarget, str]], *, split_dead_letters: bool,
                  json_schema: str | None = None, counter=None):
    """The ``mapInArrow`` function of a load of many tables in one pass: each task's
    decoded batch (with :data:`ROUTE_COLUMN`) is split by route value, and each target
    (with its run id) writes its own rows (its ``route``, from its ``rows_from``) as
    Parquet, from the same batch. Yields one descriptor per file with the index of its
    target in ``targets``; ``counter``: as :func:`file_writer`'s."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        files = [TargetFiles(t, run_id=rid, split_dead_letters=split_dead_letters,
                             json_schema=json_schema) for t, rid in targets]
        seen: dict[int, int] = {}
        for batch in batches:
            if not batch.num_rows:
                continue
            batch = _restore_null_headers(batch)
            _count_partitions(batch, seen)
            for (target, _rid), out in zip(targets, files):
                out.add(_rows_of(batch, target, pa))
        if counter is not None and seen:
            counter.add(seen)
        rows = [{**d, "target": i} for i, out in enumerate(files) for d in out.finish()]
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=routed_descriptor_schema())

    return run


def _rows_of(batch, target: WriteTarget, pa):
    """The rows of ``batch`` that are ``target``'s (its route value, at or after its
    ``rows_from``), without the route column."""
    import pyarrow.compute as pc

    value = batch.column(ROUTE_COLUMN)
    listed = pc.fill_null(pc.is_in(value, value_set=pa.array(target.route.values, pa.string())),
                          False)
    mine = pc.invert(listed) if target.route.others else listed
    if target.rows_from is not None:
        floors = _floors(batch, target.rows_from, pa, missing=_NO_ROWS)
        mine = pc.and_(mine, pc.greater_equal(batch.column("offset"), floors))
    return batch.filter(mine).drop_columns([ROUTE_COLUMN])


_NO_ROWS = 2 ** 63 - 1   # a floor above every offset


def _floors(batch, by_partition: Mapping[int, int], pa, missing: int = 0):
    """Per row, ``by_partition`` of its partition (``missing`` when absent)."""
    return pa.array([by_partition.get(p, missing) for p in batch.column("partition").to_pylist()],
                    pa.int64())


def _count_partitions(batch, seen: dict[int, int]) -> None:
    for p, n in zip(*_value_counts(batch.column("partition"))):
        seen[p] = seen.get(p, 0) + n


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
