"""Unknown outcomes of a manifest commit are settled by reading back, on every backend.

An S3 client retries a PUT whose response it lost (a 5xx, a reset connection); when the
first attempt was applied, the retry's ``If-None-Match: *`` answers 412, which reaches us
as a plain conflict although the version is ours. Treated as a lost race, the batch was
appended a second time: records of producers without a producer id were stored twice.
"""
from __future__ import annotations

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.read.reader import PartitionReader
from kafkastore.topics.admin import create_topic
from tests.faults import faulty_storage
from tests.helpers.segments import append_at_the_head

T = "t"


def _values(storage):
    t = PartitionReader(storage, T, 0).read(-2)
    return t.column("value").to_pylist()


def _conflict_after_write(op, path):
    return FileExistsError(17, "precondition failed (a retry of our own PUT)", path)


@pytest.mark.parametrize("fault", ["conflict after the write", "lost response"])
def test_a_commit_applied_but_not_acknowledged_is_not_appended_twice(root_url, fault,
                                                                     metadata_only_commits):
    storage, fs = faulty_storage(root_url)
    store = ManifestStore(storage, T, 0)
    append_at_the_head(store, "first")
    if fault == "lost response":
        fs.lose_response(match="_manifest/0")
    else:
        fs.inject("write", "after", match="_manifest/0", error=_conflict_after_write)
    landed = append_at_the_head(store, "second")
    assert fs.log, "the fault did not fire"
    head = ManifestStore(Storage(root_url), T, 0).latest()
    assert landed.version == head.version == 2
    assert [s.segment_id for s in head.segments] == ["first", "second"]
    assert head.high_watermark == 20


def test_a_real_lost_race_still_retries_on_top_of_the_winner(local_root):
    """Reading back after a conflict must not mistake another writer's version for ours."""
    storage, fs = faulty_storage(local_root)
    create_topic(storage, T, 1)
    other = Broker(storage)
    other.send(T, b"other", partition=0)

    def race(op, path):
        if not race.done:
            race.done = True
            other.flush()   # lands the same version number first
    race.done = False
    fs.on_write(lambda op, path: race(op, path), match="_manifest/0")
    mine = Broker(storage)
    mine.send(T, b"mine", partition=0)
    mine.flush()
    assert sorted(_values(storage)) == [b"mine", b"other"]


def test_a_put_retried_after_the_upload_window_re_uploads_instead(local_root):
    """The upload-age check runs before every attempt of the put, not once at planning: a
    put retried after an unknown outcome that took longer than the window would list files
    gc may already have deleted."""
    from kafkastore.clock import ManualClock

    clock = ManualClock()
    storage, fs = faulty_storage(local_root)
    storage.clock = clock
    create_topic(storage, T, 1)
    broker = Broker(storage, housekeeping=False)
    broker.send(T, b"slow", partition=0)
    fs.on_write(lambda op, path: clock.advance(45), match="_manifest/0")   # a 45 s stall
    fs.fail_before_write(match="_manifest/0")                               # ... then an error
    broker.flush()
    store = ManifestStore(storage, T, 0)
    head = store.latest()
    assert _values(storage) == [b"slow"]
    assert store.stale_uploads(head.segments) == [], "committed files older than the window"


# ---------------------------------------------------------------------------
# clock skew: gc ages objects by the store's clock, so a process clock ahead would
# delete live files; it measures the difference and refuses instead.

def _skewed(ms: int):
    from kafkastore.clock import SYSTEM, Clock

    return Clock(wall_ms=lambda: SYSTEM.wall_ms() + ms)


def test_clock_skew_is_measured_against_the_store(root_url):
    assert abs(Storage(root_url).clock_skew_ms()) < 2_500
    skewed = Storage(root_url, clock=_skewed(90_000)).clock_skew_ms()
    assert 87_500 < skewed < 92_500
    assert not Storage(root_url).list("_clock"), "the probe object was left behind"


def test_gc_refuses_to_delete_with_a_clock_ahead_of_the_store(local_root, capsys):
    from kafkastore.errors import ClockSkewError
    from kafkastore.maintenance.gc import require_clock_agreement
    from pipelines.cli import main

    storage = Storage(local_root)
    create_topic(storage, T, 1)
    for i in range(3):   # three commits, then a merge leaves three unlisted segments behind
        broker = Broker(storage, housekeeping=False)
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    # A writer's upload in flight: unlisted until its commit lands a moment from now.
    storage.put(f"topics/{T}/0/{3:020d}-inflight.log", b"not yet committed")
    files_before = sorted(o.path for o in storage.list(f"topics/{T}/0"))
    with pytest.raises(ClockSkewError, match="clock is \\+90"):
        require_clock_agreement(Storage(local_root, clock=_skewed(90_000)))
    require_clock_agreement(Storage(local_root, clock=_skewed(3_000)))   # within the bound

    import kafkastore.cli.commands as cli_mod
    real = cli_mod._storage
    try:
        cli_mod._storage = lambda cfg: Storage(local_root, clock=_skewed(600_000))
        code = main(["--root", local_root, "gc", T, "--grace-ms", "60000"])
    finally:
        cli_mod._storage = real
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "clock" in err[0], err
    assert sorted(o.path for o in storage.list(f"topics/{T}/0")) == files_before
    assert _values(storage) == [b"v0", b"v1", b"v2"]


# ---------------------------------------------------------------------------
# a chain with a hole (a partial restore, out-of-order replication) is damage, never
# the older state in front of the hole


def _chain_with_a_hole(url, commits=5, hole=3):
    storage = Storage(url)
    create_topic(storage, T, 1)
    for i in range(commits):
        broker = Broker(storage, housekeeping=False)
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    storage.delete(ManifestStore(storage, T, 0).path(hole))
    return Storage(url)   # a new process: no remembered head


def test_a_missing_version_inside_the_chain_is_damage_for_readers(root_url):
    from kafkastore.errors import ManifestGapError

    storage = _chain_with_a_hole(root_url)
    store = ManifestStore(storage, T, 0)
    store.forget_cached()
    with pytest.raises(ManifestGapError, match=r"t/0.*version 3 is missing"):
        store.latest()
    with pytest.raises(ManifestGapError):
        PartitionReader(storage, T, 0).read(-2)


def test_a_writer_never_fills_a_hole(local_root):
    from kafkastore.errors import ManifestGapError

    storage = _chain_with_a_hole(local_root)
    ManifestStore(storage, T, 0).forget_cached()
    broker = Broker(storage, housekeeping=False)
    broker.send(T, b"late", partition=0)
    with pytest.raises(ManifestGapError):
        broker.flush()
    assert not storage.exists(ManifestStore(storage, T, 0).path(3)), "a fork was written"


def test_verify_reports_a_hole(local_root, capsys):
    from pipelines.cli import main

    _chain_with_a_hole(local_root)
    assert main(["--root", local_root, "verify", T]) == 1
    out = capsys.readouterr()
    assert "version 3" in out.out and "problems" in out.err


def test_gc_and_expiry_refuse_a_chain_with_a_hole(local_root):
    from kafkastore.errors import ManifestGapError
    from kafkastore.maintenance.gc import collect_garbage

    storage = _chain_with_a_hole(local_root)
    ManifestStore(storage, T, 0).forget_cached()
    before = sorted(o.path for o in storage.list(f"topics/{T}/0"))
    far_future = storage.clock.wall_ms() + 10 * 24 * 3600 * 1000
    with pytest.raises(ManifestGapError):
        collect_garbage(storage, T, 0, now_ms=far_future, grace_ms=60_000)
    after = sorted(o.path for o in storage.list(f"topics/{T}/0"))
    assert after == before


def _replicated_out_of_order(storage, version):
    """Version ``version`` arrives before ``version - 1`` (out-of-order replication after a
    failover): a copy of the head's bytes stands in for it."""
    store = ManifestStore(storage, T, 0)
    head = store.latest().version
    storage.put(store.path(version), storage.get(store.path(head)))


def test_a_warm_writer_never_writes_into_a_gap(local_root):
    """A writer whose remembered head is recent trusts it (no listing, no existence checks):
    version N+1 absent read as "N is the head", and its put of N+1 forked the chain under
    the N+2 already stored."""
    from kafkastore.errors import ManifestGapError

    storage = Storage(local_root)
    create_topic(storage, T, 1)
    broker = Broker(storage, housekeeping=False)
    for i in range(3):
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    store = ManifestStore(storage, T, 0)
    head = store.latest().version
    _replicated_out_of_order(storage, head + 2)
    broker.send(T, b"late", partition=0)
    with pytest.raises(ManifestGapError, match=rf"t/0.*version {head + 1} is missing"):
        broker.flush()
    assert not storage.exists(store.path(head + 1)), "written into the gap: a fork"


def test_a_hole_in_an_older_group_is_reported_by_verify_and_refused_by_gc(local_root, capsys):
    """The head's group reads fine; a version missing further back is found on the listing
    gc and verify take anyway, and gc expires nothing across it."""
    from kafkastore.errors import ManifestGapError
    from kafkastore.maintenance.gc import collect_garbage
    from pipelines.cli import main

    storage = Storage(local_root)
    create_topic(storage, T, 1)
    broker = Broker(storage, housekeeping=False)
    for i in range(ManifestStore.full_every + 4):
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    store = ManifestStore(storage, T, 0)
    storage.delete([store.path(3)])
    fresh = Storage(local_root)
    assert len(PartitionReader(fresh, T, 0).read(-2)) == ManifestStore.full_every + 4
    assert main(["--root", local_root, "verify", T]) == 1
    out = capsys.readouterr()
    assert "version 3 is missing" in out.out, out.out
    before = ManifestStore(fresh, T, 0).versions()
    far_future = storage.clock.wall_ms() + 10 * 24 * 3600 * 1000
    with pytest.raises(ManifestGapError, match="version 3 is missing"):
        collect_garbage(fresh, T, 0, now_ms=far_future, grace_ms=60_000)
    assert ManifestStore(fresh, T, 0).versions() == before


def test_a_503_storm_longer_than_gc_grace_never_commits_a_deleted_file(local_root):
    """Each manifest put hangs 25 s and fails (a 503 storm); the engine re-puts the same
    prepared version after reading back "absent". gc runs 60 s into the storm and deletes
    the flush's segment, which no version lists yet. The re-put must not land listing it
    (the partition would be unreadable): the files are uploaded again and committed."""
    from kafkastore.clock import SYSTEM, ManualClock
    from kafkastore.errors import KafkaStoreError
    from pipelines.cli import main

    clock = ManualClock(wall_ms=SYSTEM.wall_ms())
    storage, fs = faulty_storage(local_root)
    storage.clock = clock
    create_topic(storage, T, 1)
    broker = Broker(storage, housekeeping=False)
    broker.send(T, b"a", partition=0)
    broker.flush()
    storm_started = clock.wall_ms()
    deleted = []

    def gc_elsewhere():
        """gc on another host, ageing by the store's clock (here: the manual clock, which
        this storage stamped its uploads with): unlisted segment files past the grace go."""
        listed = ManifestStore(Storage(local_root), T, 0).referenced_files()
        now_s = clock.wall_ms() / 1000
        for o in storage.list(f"topics/{T}/0"):
            if (o.path.endswith((".log", ".index", ".timeindex")) and o.path not in listed
                    and now_s - storage.upload_time(o.path) > 60):
                storage.delete([o.path])
                deleted.append(o.path)

    def attempt(op, path):
        clock.advance(25)
        if not deleted and clock.wall_ms() - storm_started > 60_000:
            gc_elsewhere()
    fs.on_write(attempt, match="_manifest/0", count=3)
    fs.fail_before_write(match="_manifest/0", count=3)
    broker.send(T, b"slow", partition=0)
    for _ in range(5):   # a flush may give up during the storm (retriable): flush again
        try:
            broker.flush()
            break
        except KafkaStoreError:
            continue
    assert any(p.endswith(".log") for p in deleted), "gc deleted nothing: the storm was short"
    fresh = Storage(local_root)
    head = ManifestStore(fresh, T, 0).latest()
    for seg in head.segments:
        assert fresh.exists(seg.paths(T, 0)[".log"]), f"listed but deleted: {seg.stem}"
    assert _values(fresh) == [b"a", b"slow"]
    assert main(["--root", local_root, "verify", T]) == 0


def test_the_housekeepers_gc_skips_its_round_with_a_clock_ahead_of_the_store(local_root):
    """Every serve and producer runs gc in its housekeeper: one whose clock is 90 s ahead
    deleted merged-away and in-flight segments as if past the grace; it now logs and skips."""
    from kafkastore.maintenance.housekeeper import Housekeeper

    storage = Storage(local_root)
    create_topic(storage, T, 1)
    for i in range(3):
        broker = Broker(storage, housekeeping=False)
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    storage.put(f"topics/{T}/0/{3:020d}-inflight.log", b"not yet committed")
    before = sorted(o.path for o in storage.list(f"topics/{T}/0"))
    # ahead by 90 s, and gc ages files by this clock: everything looks past a 60 s grace
    keeper = Housekeeper(Storage(local_root, clock=_skewed(90_000)))
    try:
        keeper._run_gc((T, 0))
    finally:
        keeper.close()
    assert keeper.errors and "ClockSkewError" in keeper.errors[0], keeper.errors
    assert sorted(o.path for o in storage.list(f"topics/{T}/0")) == before
    assert _values(storage) == [b"v0", b"v1", b"v2"]


def test_a_reader_without_the_hint_names_the_hole_too(root_url):
    """Found by the listing (no hint: a root restored without it): the same typed error
    naming the missing version, not "a delta whose base is no longer stored"."""
    from kafkastore import layout
    from kafkastore.errors import ManifestGapError

    storage = _chain_with_a_hole(root_url)
    storage.delete([layout.manifest_hint_path(T, 0)])
    store = ManifestStore(storage, T, 0)
    store.forget_cached()
    with pytest.raises(ManifestGapError, match=r"t/0.*version 3 is missing"):
        store.latest()


@pytest.mark.parametrize("command", [["offsets", T], ["consume", T, "--partition", "0",
                                                     "--from-offset", "0"]])
def test_offsets_and_consume_refuse_a_chain_with_a_hole_in_one_line(local_root, capsys,
                                                                   command):
    """They returned the state in front of the hole (34 of 41 records) with status 0."""
    from pipelines.cli import main

    ManifestStore(_chain_with_a_hole(local_root), T, 0).forget_cached()   # a new process
    code = main(["--root", local_root, *command])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and "t/0" in err[0] and "version 3 is missing" in err[0], err
