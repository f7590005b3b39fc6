"""Parquet data files of a load (pipelines.table_files.write_files): one file per topic-partition
and partition value, every row once."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.table_files import write_files


@settings(deadline=None, max_examples=25)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])),
                     min_size=1, max_size=40))
def test_write_files_groups_interleaved_partitions_and_null_keys(tmp_path_factory, rows):
    """Rows of several partitions, interleaved as a task packing many partitions yields them,
    with null and non-null partition values: each file holds one (partition, value), sorted
    by offset, and the files hold every row exactly once."""
    table = pa.table({"topic": ["t"] * len(rows), "partition": pa.array([p for p, _ in rows], pa.int32()),
                      "offset": pa.array(range(len(rows)), pa.int64()),
                      "region": [r for _, r in rows]})
    where = tmp_path_factory.mktemp("files")
    files = write_files(f"file://{where}", table, run_id="r", partition_by=("region",))
    seen = []
    for f in files:
        got = pq.read_table(f["url"][len("file://"):]).to_pylist()
        assert {(r["partition"], r["region"]) for r in got} == \
            {(f["partition"], rows[got[0]["offset"]][1])}
        offsets = [r["offset"] for r in got]
        assert offsets == sorted(offsets) and f["rows"] == len(got)
        assert (f["min_offset"], f["max_offset"]) == (offsets[0], offsets[-1])
        seen += offsets
    assert sorted(seen) == list(range(len(rows)))
    assert len(files) == len(set(rows))
