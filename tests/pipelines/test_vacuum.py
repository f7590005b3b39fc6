"""vacuum (pipelines/vacuum.py): expires old snapshots but never the one carrying the
current offsets nor those awaiting validation, removes unreferenced files only after
the grace period. Spark-free.

The first tests vacuum tables nobody validates (``expire_unvalidated=True``); the
last ones run vacuum between loads and the quality gate."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.reads import read_arrow, plan_scan
from pipelines.warehouse.commit import commit as iceberg_commit, KafkaCommit
from pipelines.spec.offset_ranges import OffsetRange
from kafkastore.errors import ConfigError, WarehouseError
from pipelines.quality import validate_snapshot
from pipelines.jobs.vacuum import MIN_GRACE_MS, vacuum
from tests.helpers.iceberg_tables import SCHEMA, load, rows, write
from tests.helpers.quality_tables import commit as qcommit
from tests.helpers.quality_tables import rows as qrows
from tests.helpers.quality_tables import tag as qtag
from tests.helpers.quality_tables import validated_offsets


@pytest.fixture
def wh(tmp_path):
    return Warehouse(f"file://{tmp_path}/wh")


#: A clock this far ahead sees every file and snapshot of the test as past the grace.
LATER = MIN_GRACE_MS + 60_000


def _now():
    return int(time.time() * 1000)


def test_vacuum_expires_but_keeps_the_offsets_snapshot(wh):
    t = wh.create_table("t", SCHEMA)
    for i in range(3):
        load(wh, wh.table("t"), "t", 0, 10 * i, 10 * i + 10)
    carrier = wh.table("t").current_snapshot().snapshot_id
    # Another engine commits on top (no kafkastore offsets): the carrier is no
    # longer the head, yet vacuum must keep it.
    other = wh.table("t")
    other.add_files([write(wh, other, rows("x", 0, 0, 2))])
    orphan = write(wh, t, rows("t", 0, 99, 100))          # a killed load's file
    r = vacuum(wh.table("t"), now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS, expire_unvalidated=True)
    t = wh.table("t")
    kept = {s.snapshot_id for s in t.metadata.snapshots}
    assert carrier in kept and t.current_snapshot().snapshot_id in kept
    assert len(r.expired) == 2 and len(kept) == 2
    assert committed_offsets(t) == {("t", 0): 30}
    assert read_arrow(t).num_rows == 32
    assert orphan.split("://", 1)[1] in r.deleted and not os.path.exists(orphan[len("file://"):])
    # Every remaining file is still readable; a new load continues from the offsets.
    load(wh, t, "t", 0, 30, 35)
    assert read_arrow(wh.table("t")).num_rows == 37


def test_vacuum_respects_the_grace_period_and_dry_run(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 5)
    load(wh, wh.table("t"), "t", 0, 5, 10)
    young = write(wh, t, rows("t", 0, 50, 51))             # an in-flight load's file
    r = vacuum(wh.table("t"), now_ms=_now(), grace_ms=3_600_000)
    assert r.expired == [] and r.deleted == []
    assert os.path.exists(young[len("file://"):])
    dry = vacuum(wh.table("t"), now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS, dry_run=True,
                 expire_unvalidated=True)
    assert dry.expired and young.split("://", 1)[1] in dry.deleted
    assert os.path.exists(young[len("file://"):])
    assert len(wh.table("t").metadata.snapshots) == 2


def test_vacuum_after_reprocess_removes_replaced_files(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 10)
    old_files = set(plan_scan(wh.table("t")).files)
    url = write(wh, t, rows("t", 0, 5, 10))
    iceberg_commit(wh.table("t"), KafkaCommit(
        "rp", "reprocess", (OffsetRange("t", 0, 5, 10),), (url,),
        delete_from=(OffsetRange("t", 0, 5, 10),)))
    vacuum(wh.table("t"), now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS, expire_unvalidated=True)
    t = wh.table("t")
    assert len(t.metadata.snapshots) == 1
    assert all(not os.path.exists(f[len("file://"):]) for f in old_files)
    assert sorted(read_arrow(t)["offset"].to_pylist()) == list(range(10))


def test_vacuum_on_s3_with_local_catalog(tmp_path, s3_endpoint):
    w = Warehouse(f"s3://kafkastore-test/wh-{uuid.uuid4().hex[:8]}",
                      catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"},
                      storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}})
    t = w.create_table("t", SCHEMA)
    load(w, t, "t", 0, 0, 5)
    load(w, w.table("t"), "t", 0, 5, 9)
    orphan = write(w, t, rows("t", 0, 50, 51))
    r = vacuum(w.table("t"), now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS, expire_unvalidated=True)
    assert len(r.expired) == 1 and orphan.split("://", 1)[1] in r.deleted
    t = w.table("t")
    assert committed_offsets(t) == {("t", 0): 9}
    assert sorted(read_arrow(t)["offset"].to_pylist()) == list(range(9))


def test_vacuum_racing_a_load_keeps_what_the_load_committed(wh):
    """A load commits after vacuum read the table (vacuum deleted that
    snapshot's manifest list and the table could no longer be read)."""
    for i in range(3):
        load(wh, wh.create_table("t", SCHEMA), "t", 0, 10 * i, 10 * i + 10)
    seen = wh.table("t")                                  # vacuum reads the table...
    load(wh, wh.table("t"), "t", 0, 30, 40)               # ...a load commits...
    r = vacuum(seen, now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS)  # ...vacuum goes on
    assert r.expired == [] and r.deleted == []
    t = wh.table("t")
    assert sorted(read_arrow(t)["offset"].to_pylist()) == list(range(40))
    assert committed_offsets(t) == {("t", 0): 40}
    load(wh, t, "t", 0, 40, 45)                           # and the next load works
    assert read_arrow(wh.table("t")).num_rows == 45


class _CommitsWhenReread:
    """A table whose next re-read from the catalog first lets ``commit`` run: a load
    committing after vacuum listed the files and before it deletes any."""

    def __init__(self, table, commit):
        self._table, self._commit = table, commit

    def __getattr__(self, name):
        return getattr(self._table, name)

    def refresh(self):
        self._commit()
        return self._table.refresh()


def test_vacuum_keeps_files_a_load_commits_after_the_listing(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 10)
    url = write(wh, t, rows("t", 0, 10, 20))              # the load's file, already written
    commit = lambda: iceberg_commit(wh.table("t"), KafkaCommit(   # noqa: E731
        "late", "load", (OffsetRange("t", 0, 10, 20),), files=(url,)))
    r = vacuum(_CommitsWhenReread(wh.table("t"), commit), now_ms=_now() + LATER,
               grace_ms=MIN_GRACE_MS)
    assert r.deleted == [] and os.path.exists(url[len("file://"):])
    assert sorted(read_arrow(wh.table("t"))["offset"].to_pylist()) == list(range(20))


def test_vacuum_refuses_a_grace_below_the_floor(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 5)
    with pytest.raises(ConfigError, match=f"below the safe floor of {MIN_GRACE_MS} ms"):
        vacuum(wh.table("t"), now_ms=_now(), grace_ms=MIN_GRACE_MS - 1)
    with pytest.raises(ConfigError, match="below the safe floor"):
        vacuum(wh.table("t"), now_ms=_now(), grace_ms=0)


# ---------------------------------------------------------------------------
# vacuum and the quality gate's ``validated`` tag


def _vacuum_now(wh, name, **kw):
    return vacuum(wh.table(name), now_ms=_now() + LATER, grace_ms=MIN_GRACE_MS, **kw)


def test_vacuum_keeps_loads_after_the_tag_until_they_are_validated(wh):
    l1 = qcommit(wh, "g", {("orders", 0): (0, 2)}, [qrows("orders", 0, [0, 1])])
    validate_snapshot(wh.url, "g", l1, compacted=False, docs=False)
    l2 = qcommit(wh, "g", {("orders", 0): (2, 4)}, [qrows("orders", 0, [2, 3])])
    l3 = qcommit(wh, "g", {("orders", 0): (4, 5)}, [qrows("orders", 0, [4])])
    r = _vacuum_now(wh, "g")
    # The gate walks l2 and l3: the tag moves to the head (before the fix vacuum
    # expired l2 and the gate refused to move the tag, for ever).
    assert validate_snapshot(wh.url, "g", l3, compacted=False, docs=False).published
    assert qtag(wh, "g") == l3 == wh.table("g").current_snapshot().snapshot_id
    # l2 (not the head, not the carrier, not tagged) awaited validation: kept.
    assert r.expired == [] and r.awaiting == [l3, l2]
    assert "2 awaiting validation" in r.render()
    # Once validated, the old snapshots go; the tag and the rows stay.
    r = _vacuum_now(wh, "g")
    assert sorted(r.expired) == sorted([l1, l2]) and r.awaiting == []
    assert validated_offsets(wh, "g") == [0, 1, 2, 3, 4]
    l4 = qcommit(wh, "g", {("orders", 0): (5, 6)}, [qrows("orders", 0, [5])])
    assert validate_snapshot(wh.url, "g", l4, compacted=False, docs=False).published


def test_without_a_tag_vacuum_keeps_all_of_main_until_the_first_validation(wh):
    l1 = qcommit(wh, "n", {("orders", 0): (0, 2)}, [qrows("orders", 0, [0, 1])])
    l2 = qcommit(wh, "n", {("orders", 0): (2, 3)}, [qrows("orders", 0, [2])])
    r = _vacuum_now(wh, "n")
    assert r.expired == [] and r.awaiting == [l2, l1]
    # A dead-letter table's snapshots wait with the runs of its table that wait.
    n1 = qcommit(wh, "n2", {("orders", 0): (0, 2)}, [qrows("orders", 0, [0])],
                 [qrows("orders", 0, [1], error="x")])
    qcommit(wh, "n2", {("orders", 0): (2, 4)}, [qrows("orders", 0, [2])],
            [qrows("orders", 0, [3], error="x")])
    assert _vacuum_now(wh, "n2_dead_letters").expired == []
    validate_snapshot(wh.url, "n2", n1, compacted=False, docs=False,
                      thresholds={"max_dead_letter_fraction": 0.5})
    assert len(_vacuum_now(wh, "n2_dead_letters").expired) == 1     # n1's run is validated
    # A table with no kafkastore load (another engine's) has nothing to validate.
    other = wh.create_table("foreign", SCHEMA)
    for i in range(2):
        other.add_files([write(wh, other, rows("x", 0, i, i + 1))])
        other = wh.table("foreign")
    assert len(_vacuum_now(wh, "foreign").expired) == 1
    # The gate's first walk reaches l1: the tag moves to the head.
    assert validate_snapshot(wh.url, "n", l2, compacted=False, docs=False).published
    assert qtag(wh, "n") == l2
    assert _vacuum_now(wh, "n").expired == [l1]


def test_expire_unvalidated_is_the_old_rule_and_the_gate_refuses_the_cut(wh):
    l1 = qcommit(wh, "u", {("orders", 0): (0, 1)}, [qrows("orders", 0, [0])])
    validate_snapshot(wh.url, "u", l1, compacted=False, docs=False)
    l2 = qcommit(wh, "u", {("orders", 0): (1, 2)}, [qrows("orders", 0, [1])])
    l3 = qcommit(wh, "u", {("orders", 0): (2, 3)}, [qrows("orders", 0, [2])])
    assert _vacuum_now(wh, "u", expire_unvalidated=True).expired == [l2]
    with pytest.raises(WarehouseError, match="expired"):
        validate_snapshot(wh.url, "u", l3, compacted=False, docs=False)
    assert qtag(wh, "u") == l1
