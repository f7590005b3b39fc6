"""`kafkastore vacuum --grace-ms 0` at the command line (as the operator typed
it): refused in one line before anything is expired or deleted. Spark-free."""
from __future__ import annotations

from pipelines.cli import main
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.vacuum import MIN_GRACE_MS
from tests.helpers.cli import one_error_line
from tests.helpers.iceberg_tables import SCHEMA, load


def test_cli_vacuum_with_a_grace_below_the_floor_is_refused(tmp_path, capsys):
    wh = Warehouse(f"file://{tmp_path}/wh")
    for i in range(3):
        load(wh, wh.create_table("t", SCHEMA) if i == 0 else wh.table("t"), "t", 0, 5 * i, 5 * i + 5)
    before = [s.snapshot_id for s in wh.table("t").metadata.snapshots]
    for grace in ("0", str(MIN_GRACE_MS - 1)):
        capsys.readouterr()
        rc = main(["vacuum", "--warehouse", wh.url, "--table", "t", "--grace-ms", grace,
                   "--expire-unvalidated", "--retain-last", "1"])
        line = one_error_line(rc, capsys.readouterr().err)
        assert f"below the safe floor of {MIN_GRACE_MS} ms" in line
    t = wh.table("t")
    assert [s.snapshot_id for s in t.metadata.snapshots] == before
    assert sorted(read_arrow(t)["offset"].to_pylist()) == list(range(15))
