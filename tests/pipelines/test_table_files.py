"""Parquet data files of a load (pipelines.warehouse.files.write_files): one file per topic-partition
and partition value, every row once."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.warehouse.files import write_files
from pipelines.spec.table_layout import TableLayout


@settings(deadline=None, max_examples=40)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])),
                     min_size=1, max_size=40),
       data=st.data())
def test_write_files_groups_interleaved_partitions_and_null_keys(tmp_path_factory, rows, data):
    """Rows of several partitions, interleaved as a task packing many partitions yields them,
    in several batches, with null and non-null partition values, in offset order or not:
    each file holds one (partition, value), sorted by offset, and the files hold every row
    exactly once."""
    n = len(rows)
    offsets = data.draw(st.sampled_from([list(range(n))]) | st.permutations(range(n)))
    table = pa.table({"topic": ["t"] * n, "partition": pa.array([p for p, _ in rows], pa.int32()),
                      "offset": pa.array(offsets, pa.int64()),
                      "region": [r for _, r in rows]})
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=4)))
    table = pa.Table.from_batches([b for a, z in zip([0] + cuts, cuts + [n])
                                   for b in table.slice(a, z - a).to_batches()])
    region_of = {o: r for o, (_, r) in zip(offsets, rows)}
    where = tmp_path_factory.mktemp("files")
    files = write_files(f"file://{where}", table, run_id="r",
                        layout=TableLayout(partition_by=("region",)))
    seen = []
    for f in files:
        got = pq.read_table(f["url"][len("file://"):]).to_pylist()
        assert {(r["partition"], r["region"]) for r in got} == \
            {(f["partition"], region_of[got[0]["offset"]])}
        offsets = [r["offset"] for r in got]
        assert offsets == sorted(offsets) and f["rows"] == len(got)
        assert (f["min_offset"], f["max_offset"]) == (offsets[0], offsets[-1])
        seen += offsets
    assert sorted(seen) == list(range(len(rows)))
    assert len(files) == len(set(rows))
