"""A damaged delta, full version or hint of a delta-format partition at the command line:
``consume``, ``offsets`` and ``verify`` give one line naming topic, partition and version
(never a traceback, never older state); a damaged hint only costs a listing."""
from __future__ import annotations

import pytest

from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.cli.entry import main
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.cli import cli_runner, one_error_line

T, P = "orders", 0


@pytest.fixture
def damaged_root(tmp_path, capsys, monkeypatch, clean_config_env):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, T, 1)
    b = Broker(storage, housekeeping=False)
    for i in range(20):  # versions 1 and 16 full, the rest deltas
        b.send(T, b"v%d" % i, partition=P)
        b.flush()

    def damage(version, data):
        path = layout.manifest_path(T, P, version) if version else layout.manifest_hint_path(T, P)
        storage.put(path, data)
        ManifestStore(storage, T, P).forget_cached()  # read as a new process would

    return cli_runner(main, capsys, monkeypatch, root), damage


@pytest.mark.parametrize("version, data, reason", [
    (18, b'{"format":2,"kind":"delta"', "not JSON"),
    (18, b'{"format":2,"kind":"delta","base_version":17}', "bad delta"),
    (18, b"", "not JSON"),
    (16, b'{"format":2,"kind":"full","topic":"orders"}', "bad manifest"),
])
def test_a_damaged_version_is_one_line_naming_topic_partition_and_version(damaged_root, version,
                                                                          data, reason):
    run, damage = damaged_root
    damage(version, data)
    for argv in (("consume", T), ("offsets", T)):
        rc, out, err = run(*argv)
        line = one_error_line(rc, err)
        assert f"{T}/{P} version {version}" in line and reason in line, line
        assert "Traceback" not in err and '"offset"' not in out  # no older state printed
    rc, out, err = run("verify", T)
    assert rc == 1 and "Traceback" not in err
    assert f"{T}/{P} version {version}" in out + err
    assert f"version {version + 1}" in out + err  # a delta after it cannot be rebuilt either


@pytest.mark.parametrize("hint", [b"{not json", b'{"version": 18}', b'{"version": 99}'])
def test_a_damaged_hint_costs_a_listing_and_verify_reports_it(damaged_root, hint):
    run, damage = damaged_root
    damage(None, hint)
    rc, out, err = run("consume", T)
    assert rc == 0 and out.count('"offset"') == 20  # the real head, not an older state
    rc, out, err = run("verify", T)
    assert rc == 1 and "hint" in out + err and "Traceback" not in err


def test_a_head_delta_whose_base_versions_were_deleted(damaged_root, tmp_path):
    """What a gc of code before delta versions does to an upgraded root (its expiry deletes
    every version but the newest without reading them): the head is a delta with no base.
    Readers say so in one line (never older state), verify reports it, and gc refuses the
    partition instead of taking it for one that references nothing and deleting its files."""
    from kafkastore.errors import CorruptMetadataError
    from kafkastore.maintenance.gc import collect_garbage

    run, damage = damaged_root
    storage = Storage(run.root)
    store = ManifestStore(storage, T, P)
    files = {o.path for o in storage.list(layout.partition_dir(T, P)) if "/_manifest/" not in o.path}
    storage.delete([layout.manifest_path(T, P, v) for v in range(1, 20)])  # 20 is a delta
    store.forget_cached()
    with pytest.raises(CorruptMetadataError, match=rf"{T}/{P} version 20 .*base versions"):
        store.latest()
    rc, out, err = run("consume", T)
    assert f"{T}/{P} version 20" in one_error_line(rc, err) and '"offset"' not in out
    rc, out, err = run("verify", T)
    assert rc == 1 and "version 20" in out + err
    with pytest.raises(CorruptMetadataError, match="version 20"):
        collect_garbage(storage, T, P, now_ms=storage.clock.wall_ms() + 10 ** 9)
    left = {o.path for o in storage.list(layout.partition_dir(T, P)) if "/_manifest/" not in o.path}
    assert left == files  # every segment file kept (the log can still be re-imported)


def test_deltas_on_a_damaged_first_full_version_are_reported_too(damaged_root):
    """Version 1 (full) damaged: the deltas 2..15 on it cannot be rebuilt and verify says so
    for each (they were skipped silently); 16 (full) and the head still read."""
    run, damage = damaged_root
    damage(1, b"{not json")
    rc, out, err = run("verify", T)
    assert rc == 1
    for v in range(1, 16):
        assert f"{T}/{P} version {v} " in out + err, v
    assert f"version 16 " not in out + err and "version 20 " not in out + err
    rc, out, err = run("consume", T)
    assert rc == 0 and out.count('"offset"') == 20
