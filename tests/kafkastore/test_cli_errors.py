"""At the command line: one-line errors where tracebacks were, and the
smaller fixes (empty --root, read-only commands, a missing bucket, the data-loss hint)."""
from __future__ import annotations

import json
import os
import time

import pytest

from kafkastore.read.verify import verify_partition
from kafkastore.write.kafka_import import import_kafka_dir
from kafkastore.cli.entry import main
from kafkastore.errors import CorruptRecordError, StoragePermissionError
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import AppendSegments, ManifestStore
from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.cli import cli_runner, one_error_line
from tests.helpers.logdata import upload_segment


pytestmark = pytest.mark.usefixtures("clean_config_env")


@pytest.fixture
def cli(capsys, monkeypatch, local_root):
    return cli_runner(main, capsys, monkeypatch, local_root)


@pytest.mark.parametrize("line, what", [
    (r'{"value": "\ud800"}', "value"),
    (r'{"key": "k\udc00", "value": "v"}', "key"),
    (r'{"value": "v", "headers": [["h", "\ud800"]]}', "header value"),
    (r'{"value": "v", "headers": [["\ud800", "x"]]}', "header key"),
    (r'{"value": {"a": ["ok", "\udfff"]}}', "value"),
])
def test_lone_surrogates_are_one_line(cli, line, what):
    cli("topics", "create", "t")
    err = one_error_line(*cli("produce", "t", stdin='{"value": "fine"}\n' + line + "\n")[::2])
    assert f"line 2: {what} holds a lone surrogate" in err
    assert cli("consume", "t")[1] == ""  # nothing committed


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(cli, const):
    cli("topics", "create", "t")
    err = one_error_line(*cli("produce", "t", stdin='{"value": {"x": %s}}\n' % const)[::2])
    assert "line 1: not valid JSON" in err and const.lstrip("-") in err


@pytest.mark.parametrize("yaml_text, words", [
    ("root: 5\n", "'root' in the config file must be a string"),
    ("storage_options: 5\n", "'storage_options' in the config file must be a mapping"),
    ("topics: {x: 5}\n", "topic 'x' in the config file must be a mapping"),
    ("topics: {x: {partitions: abc}}\n", "partitions must be a positive integer, got 'abc'"),
    ("topics: {x: {config: 5}}\n", "config must be a mapping"),
])
def test_config_types_are_one_line(cli, tmp_path, yaml_text, words):
    conf = tmp_path / "k.yaml"
    conf.write_text(yaml_text)
    err = one_error_line(*cli("--conf", str(conf), "topics", "apply", root=None)[::2])
    assert words in err


def test_empty_root_is_an_error_not_the_demo_default(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = one_error_line(*cli("topics", "list", root="")[::2])
    assert "--root is empty" in err
    assert not (tmp_path / "demo").exists()


def test_read_only_commands_create_nothing(cli, tmp_path):
    root = tmp_path / "nothing-here"
    assert cli("topics", "list", root=f"file://{root}")[0] == 0
    assert cli("offsets", "t", root=f"file://{root}")[0] == 1
    assert cli("consume", "t", root=f"file://{root}")[0] == 1
    assert not root.exists()


def test_topics_list_on_a_missing_bucket_is_an_error(cli, s3_endpoint):
    err = one_error_line(*cli("topics", "list", root="s3://no-such-bucket-here/x")[::2])
    assert "bucket 'no-such-bucket-here'" in err and "does not exist" in err


def test_data_loss_hint_names_a_real_flag(cli):
    from pipelines.cli import build_parser

    args = build_parser().parse_args(["load", "t", "--on-data-loss", "skip", "--table", "x"])
    assert args.on_data_loss == "skip"
    import pipelines.source.planning as planning

    assert "kafkastore load --on-data-loss skip" in open(planning.__file__).read()


def test_stopped_produce_says_what_was_committed(cli):
    """Item 4: a writer that stops says exactly which records were committed."""
    cli("topics", "create", "t")
    lines = "".join(json.dumps({"value": f"v{i}"}) + "\n" for i in range(4)) + "not json\n"
    err = one_error_line(*cli("produce", "t", "--flush-every", "2", stdin=lines)[::2])
    assert "line 5: not valid JSON" in err
    assert "stopped after committing 4 record(s) to t: p0 [0, 4) (input lines 1-4)" in err
    assert len(cli("consume", "t")[1].splitlines()) == 4


# -- item 6: import, manifests, gc, permissions ---------------------------------------

def _write_dir(tmp_path, name, segments):
    d = tmp_path / name
    d.mkdir()
    for base, data in segments.items():
        (d / f"{base:020d}.log").write_bytes(data)
    return str(d)


def _batch(base, values):
    data = bytearray(encode_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)]))
    data[0:8] = base.to_bytes(8, "big")
    return bytes(data)


def test_import_adopts_up_to_a_torn_last_segment(tmp_path, root_url):
    storage = Storage(root_url)
    create_topic(storage, "t", 1)
    d = _write_dir(tmp_path, "t-0", {0: _batch(0, [b"a", b"b"]), 2: _batch(2, [b"c"])[:30]})
    result = import_kafka_dir(storage, d, "t", 0)
    assert (result.segments, result.high_watermark) == (1, 2)
    assert any("holds no complete batch" in n and "torn" in n for n in result.notes)


def test_import_of_random_bytes_names_the_file(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, "t", 1)
    d = _write_dir(tmp_path, "t-0", {0: os.urandom(400)})
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000\.log: not a Kafka log segment"):
        import_kafka_dir(storage, d, "t", 0)


def _three_versions(storage):
    create_topic(storage, "t", 1)
    broker = Broker(storage)
    for _ in range(3):
        broker.send("t", b"x", partition=0)
        broker.flush()
    return ManifestStore(storage, "t", 0)


def test_corrupt_older_version_is_named_flagged_by_verify_and_does_not_block_gc(root_url):
    storage = Storage(root_url)
    store = _three_versions(storage)
    broker = Broker(storage)
    for _ in range(14):  # versions 4..17: 16 is full, so 16 and 17 do not need version 1
        broker.send("t", b"x", partition=0)
        broker.flush()
    storage.put(store.path(1), b"{not json")
    store.forget_cached()
    with pytest.raises(Exception, match=r"manifest of t/0 version 1"):
        store.load(1)
    report = verify_partition(storage, "t", 0)
    assert not report.ok and any("manifest of t/0 version 1" in line for line in report.lines())
    gc = collect_garbage(storage, "t", 0, now_ms=int(time.time() * 1000))
    assert any("version 1" in e for e in gc.errors)  # reported, not fatal
    storage.put(store.path(17), b"{not json")  # the newest decides what is live: that stops gc
    with pytest.raises(Exception, match="version 17"):
        collect_garbage(storage, "t", 0, now_ms=int(time.time() * 1000))


def test_a_damaged_full_version_under_the_head_delta_stops_gc(root_url):
    """Deltas on a damaged full version cannot be rebuilt: when the head is one of them,
    nobody knows what is live, so gc stops (it used to skip them and see nothing listed)."""
    storage = Storage(root_url)
    store = _three_versions(storage)  # 1 full, 2 and 3 deltas on it
    storage.put(store.path(1), b"{not json")
    store.forget_cached()
    with pytest.raises(Exception, match="version 3"):
        collect_garbage(storage, "t", 0, now_ms=int(time.time() * 1000))


def test_a_refused_write_is_a_definite_failure_not_an_unknown_outcome(local_root):
    fs = FaultyFS(Storage(local_root).fs)
    storage = Storage(local_root, fs=fs)
    create_topic(storage, "t", 1)
    entry = upload_segment(storage, "t", 0, 0, [1])
    fs.inject("write", "before", match=lambda op, path: "/_manifest/" in path, count=1,
              error=lambda op, path: PermissionError(13, "Permission denied", path))
    with pytest.raises(StoragePermissionError, match="permission denied"):
        ManifestStore(storage, "t", 0).commit(lambda m: ([AppendSegments((entry,))], []))
    assert [o for o in fs.log if o[0] == "write"] == [("write", "before", fs.log[0][2])]  # tried once


@pytest.mark.parametrize("argv", [("topics", "create", "t"), ("topics", "describe", "t"),
                                  ("offsets", "t"), ("groups", "list")])
def test_commands_on_a_missing_bucket_say_so_in_one_line(cli, s3_endpoint, argv):
    """Not an "unknown outcome", not an unknown topic: the bucket."""
    rc, _, err = cli(*argv, root="s3://no-such-bucket-here/x")
    line = one_error_line(rc, err)
    assert line == "kafkastore: error: bucket 'no-such-bucket-here' of s3://no-such-bucket-here/x does not exist"
