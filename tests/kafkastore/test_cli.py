"""The `kafkastore` command line (DESIGN.md section 7), in-process through main(argv) and,
for the console script itself, as subprocesses."""
from __future__ import annotations

import base64
import json
import os
import random
import struct
import subprocess
import sys

import pytest

from kafkastore.cli.entry import main
from kafkastore.format.control import encode_marker_batch
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from tests.helpers.cli import cli_runner

kp_default = pytest.importorskip("kafka.partitioner.default")
kp_records = pytest.importorskip("kafka.record.default_records")

KAFKASTORE = os.path.join(os.path.dirname(sys.executable), "kafkastore")
FIELDS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]


pytestmark = pytest.mark.usefixtures("clean_config_env")


@pytest.fixture
def cli(capsys, monkeypatch, local_root):
    """``cli(*argv, stdin=...) -> (exit status, stdout, stderr)`` against ``local_root``."""
    return cli_runner(main, capsys, monkeypatch, local_root)


def jsonl(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def consumed(out: str) -> list[dict]:
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(list(r) == FIELDS for r in rows)           # exactly these fields, in this order
    return rows


def one_error_line(rc, err, match):
    assert rc == 1
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kafkastore: error: ") and match in lines[0], lines[0]
    assert "Traceback" not in err


def hw(cli, topic="t"):
    rc, out, _ = cli("offsets", topic)
    assert rc == 0
    return {p: v["high_watermark"] for p, v in json.loads(out)["partitions"].items()}


# ---------------------------------------------------------------------------
# topics
# ---------------------------------------------------------------------------

def test_topics_create_list_describe(cli):
    rc, out, err = cli("topics", "create", "orders", "--partitions", "3",
                       "--config", "retention.ms=1000", "--config", "cleanup.policy=compact")
    assert rc == 0 and out == "" and "created topic orders with 3 partition(s)" in err
    assert cli("topics", "create", "audit")[0] == 0
    rc, out, _ = cli("topics", "list")
    assert (rc, out) == (0, "audit\norders\n")
    rc, out, _ = cli("topics", "describe", "orders")
    d = json.loads(out)
    assert d["topic"] == "orders" and d["partitions"] == 3
    assert d["config"] == {"retention.ms": 1000, "cleanup.policy": "compact"}
    assert d["offsets"] == {str(p): {"log_start_offset": 0, "high_watermark": 0, "segments": 0,
                                     "size": 0} for p in range(3)}
    rc, out, _ = cli("topics", "describe", "orders", "--all")
    assert json.loads(out)["config"]["segment.bytes"] == 1024 ** 3
    one_error_line(*cli("topics", "create", "orders")[::2], "already exists")


# ---------------------------------------------------------------------------
# produce and consume
# ---------------------------------------------------------------------------

def test_produce_then_consume_exact(cli):
    cli("topics", "create", "t", "--partitions", "2")
    lines = jsonl(
        {"key": "k1", "value": "plain", "timestamp": 1000, "partition": 1},
        {"value": {"b": 2, "a": [1, "x"]}, "partition": 1, "timestamp": 2000,
         "headers": [["h1", "v1"], ["h2", None], ["h3", {"base64": "/w=="}]]},
        {"key": None, "value": None, "partition": 1, "timestamp": 3000},
        {"key": {"base64": "AP8="}, "value": {"base64": base64.b64encode(b"\x80\x81").decode()},
         "partition": 1, "timestamp": 4000},
        {"value": "é ü", "partition": 1, "timestamp": 5000},
    )
    rc, out, err = cli("produce", "t", stdin=lines)
    assert rc == 0 and out == "" and err.strip() == "produced 5 record(s) to t: p1 [0, 5)"
    rc, out, err = cli("consume", "t")
    assert rc == 0 and err == ""
    assert consumed(out) == [
        {"topic": "t", "partition": 1, "offset": 0, "timestamp": 1000, "key": "k1",
         "value": "plain", "headers": []},
        {"topic": "t", "partition": 1, "offset": 1, "timestamp": 2000, "key": None,
         "value": '{"b":2,"a":[1,"x"]}', "headers": [["h1", "v1"], ["h2", None],
                                                     ["h3", {"base64": "/w=="}]]},
        {"topic": "t", "partition": 1, "offset": 2, "timestamp": 3000, "key": None,
         "value": None, "headers": []},
        {"topic": "t", "partition": 1, "offset": 3, "timestamp": 4000, "key": {"base64": "AP8="},
         "value": {"base64": "gIE="}, "headers": []},
        {"topic": "t", "partition": 1, "offset": 4, "timestamp": 5000, "key": None,
         "value": "é ü", "headers": []},
    ]
    assert "é ü" in out                                   # UTF-8 text, not \\u escapes


def test_keys_go_where_kafka_puts_them(cli):
    cli("topics", "create", "t", "--partitions", "6")
    keys = ["user-%d" % i for i in range(60)]
    assert cli("produce", "t", stdin=jsonl(*({"key": k, "value": k} for k in keys)))[0] == 0
    rows = consumed(cli("consume", "t")[1])
    assert len(rows) == 60
    for r in rows:
        assert r["partition"] == (kp_default.murmur2(r["key"].encode()) & 0x7FFFFFFF) % 6


def test_consume_options(cli):
    cli("topics", "create", "t", "--partitions", "2")
    recs = [{"value": "v%d" % i, "partition": i % 2, "timestamp": 1000 + 10 * i} for i in range(20)]
    cli("produce", "t", stdin=jsonl(*recs))
    rows = consumed(cli("consume", "t", "--partition", "1")[1])
    assert [r["value"] for r in rows] == ["v%d" % i for i in range(1, 20, 2)]
    rows = consumed(cli("consume", "t", "--partition", "0", "--from-offset", "7")[1])
    assert [r["offset"] for r in rows] == [7, 8, 9]
    rows = consumed(cli("consume", "t", "--partition", "0", "--from-offset", "2", "--limit", "3")[1])
    assert [r["value"] for r in rows] == ["v4", "v6", "v8"]
    rows = consumed(cli("consume", "t", "--limit", "12")[1])     # partition 0 first, then 1
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, o) for o in range(10)] + [(1, 0), (1, 1)]
    rows = consumed(cli("consume", "t", "--from-timestamp", "1105")[1])
    assert [r["value"] for r in rows] == ["v%d" % i for i in range(12, 20, 2)] + \
        ["v%d" % i for i in range(11, 20, 2)]
    rows = consumed(cli("consume", "t", "--partition", "1", "--from-timestamp", "999999")[1])
    assert rows == []
    rc, out, _ = cli("consume", "t", "--limit", "0")
    assert (rc, out) == (0, "")
    rc, out, _ = cli("consume", "t", "--partition", "0", "--from-offset", "10")   # at the HW
    assert (rc, out) == (0, "")
    one_error_line(*cli("consume", "t", "--partition", "0", "--from-offset", "11")[::2],
                   "log start offset 0, high watermark 10")


def test_consume_limit_skips_transaction_markers(cli):
    # --limit counts records, not offsets: markers and aborted records do not use it up.
    from kafkastore.write.log_writer import LogWriter as Broker

    cli("topics", "create", "t")
    b = Broker(Storage(cli.root))
    b.begin_transaction()
    b.send("t", b"c0")
    b.commit_transaction()
    b.begin_transaction()
    b.send("t", b"a0")
    b.abort_transaction()
    for i in range(3):
        b.send("t", b"p%d" % i)
    b.flush()
    rows = consumed(cli("consume", "t", "--limit", "3")[1])
    assert [r["value"] for r in rows] == ["c0", "p0", "p1"]
    rows = consumed(cli("consume", "t", "--isolation-level", "read_uncommitted")[1])
    assert [r["value"] for r in rows] == ["c0", "a0", "p0", "p1", "p2"]


def test_timestamps_printed_exactly(cli):
    # Values where converting through float seconds (datetime.timestamp() * 1000) loses a
    # millisecond, and one past the year 9999, which datetime cannot hold.
    import pyarrow as pa

    rnd = random.Random(0)
    candidates = [rnd.randrange(0, 253_402_300_799_999) for _ in range(5000)]   # up to 9999-12-31
    as_dt = pa.array([ms * 1000 for ms in candidates], pa.int64()).view(
        pa.timestamp("us", tz="UTC")).to_pylist()
    tricky = [ms for ms, t in zip(candidates, as_dt) if int(t.timestamp() * 1000) != ms][:5]
    assert len(tricky) == 5
    tricky += [0, 300_000_000_000_000]
    cli("topics", "create", "t")
    assert cli("produce", "t", stdin=jsonl(*({"value": "x", "timestamp": ts} for ts in tricky)))[0] == 0
    rows = consumed(cli("consume", "t")[1])
    assert [r["timestamp"] for r in rows] == tricky


def test_consume_output_round_trips_through_produce(cli):
    cli("topics", "create", "src", "--partitions", "3")
    cli("topics", "create", "dst", "--partitions", "3")
    recs = [{"key": "k%d" % i, "value": {"base64": base64.b64encode(bytes([i, 255 - i])).decode()},
             "headers": [["n", str(i)]], "timestamp": 5000 + i} for i in range(30)]
    recs.append({"key": None, "value": None, "partition": 2, "timestamp": 1})
    cli("produce", "src", stdin=jsonl(*recs))
    _, out, _ = cli("consume", "src")
    assert cli("produce", "dst", stdin=out)[0] == 0
    _, copied, _ = cli("consume", "dst")
    strip = [{k: v for k, v in r.items() if k != "topic"} for r in consumed(out)]
    assert [{k: v for k, v in r.items() if k != "topic"} for r in consumed(copied)] == strip


def test_offsets_shape(cli):
    cli("topics", "create", "t", "--partitions", "2")
    cli("produce", "t", "--partition", "1", stdin=jsonl({"value": "a"}, {"value": "b"}))
    rc, out, _ = cli("offsets", "t")
    assert rc == 0
    assert json.loads(out) == {"topic": "t", "partitions": {
        "0": {"log_start_offset": 0, "high_watermark": 0},
        "1": {"log_start_offset": 0, "high_watermark": 2}}}


def test_produce_compression_option(cli):
    from kafkastore.format.segment_scan import iter_batches

    cli("topics", "create", "t")
    cli("produce", "t", "--compression", "zstd", stdin=jsonl(*({"value": "x" * 50} for _ in range(20))))
    storage = Storage(cli.root)
    [seg] = ManifestStore(storage, "t", 0).latest().segments
    [(_, h)] = list(iter_batches(storage.get(seg.paths("t", 0)[".log"])))
    assert h.compression.name == "ZSTD" and h.record_count == 20


# ---------------------------------------------------------------------------
# failures leave the log as it was
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad, match", [
    ("{not json\n", "line 3: not valid JSON"),
    ('{"value": "v", "partition": 9}\n', "line 3: topic 't' has partitions 0..1, not 9"),
    ('{"value": "%s"}\n' % ("x" * 2000), "line 3: record of about"),
    ('{"value": "v", "timestamp": -5}\n', "line 3: timestamp"),
    (b"\xff\xfe\n", "line 3: not UTF-8"),
])
def test_failed_produce_leaves_nothing_visible(cli, bad, match):
    cli("topics", "create", "t", "--partitions", "2",
        "--config", "segment.bytes=300", "--config", "max.message.bytes=1500")
    cli("produce", "t", "--partition", "0", stdin=jsonl({"value": "before"}))
    before = hw(cli)
    good = jsonl(*({"value": "x%d" % i} for i in range(2))).encode()
    tail = jsonl(*({"value": "y%d" % i, "partition": i % 2} for i in range(50))).encode()
    bad = bad if isinstance(bad, bytes) else bad.encode()
    rc, out, err = cli("produce", "t", stdin=good + bad + tail)
    one_error_line(rc, err, match)
    assert hw(cli) == before
    assert [r["value"] for r in consumed(cli("consume", "t")[1])] == ["before"]


def test_flush_every_commits_in_steps(cli):
    cli("topics", "create", "t")
    lines = jsonl(*({"value": "v%d" % i} for i in range(5))) + "oops\n"
    rc, _, err = cli("produce", "t", "--flush-every", "2", stdin=lines)
    one_error_line(rc, err, "line 6")
    assert hw(cli) == {"0": 4}                            # what was committed stays committed


# ---------------------------------------------------------------------------
# import and verify
# ---------------------------------------------------------------------------

def kafka_batch(base, values, *, pid=-1, epoch=-1, seq=-1, txn=False):
    b = kp_records.DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=txn,
                                             producer_id=pid, producer_epoch=epoch,
                                             base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + base + i, key=None, value=v, headers=[])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base)
    return bytes(buf)


def kafka_dir(tmp_path, name="orders-0"):
    d = tmp_path / "kafka" / name
    d.mkdir(parents=True)
    (d / f"{0:020d}.log").write_bytes(b"".join([
        kafka_batch(0, [b"a", b"b"]),
        kafka_batch(2, [b"t0", b"t1"], pid=5, epoch=0, seq=0, txn=True),
        encode_marker_batch(offset=4, timestamp=1_700_000_000_100, producer_id=5,
                            producer_epoch=0, commit=False),
    ]))
    (d / f"{5:020d}.log").write_bytes(kafka_batch(5, [b"c", b"d"]))
    (d / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (d / "partition.metadata").write_text("version: 0\n")
    (d / f"{0:020d}.snapshot").write_bytes(b"\x00")
    return d


def test_import_then_consume_read_committed(cli, tmp_path):
    cli("topics", "create", "orders")
    d = kafka_dir(tmp_path)
    rc, out, err = cli("import", str(d))                  # topic and partition from the name
    assert rc == 0 and "imported 2 segment(s), 7 record(s) into orders/0: offsets [0, 7)" in err
    rows = consumed(cli("consume", "orders")[1])
    assert [(r["offset"], r["value"]) for r in rows] == [(0, "a"), (1, "b"), (5, "c"), (6, "d")]
    rows = consumed(cli("consume", "orders", "--isolation-level", "read_uncommitted")[1])
    assert [r["value"] for r in rows] == ["a", "b", "t0", "t1", "c", "d"]
    rc, out, _ = cli("verify", "orders")
    assert rc == 0 and out.count(": ok (") == 2


def test_import_explicit_topic_and_errors(cli, tmp_path):
    cli("topics", "create", "other", "--partitions", "2")
    d = kafka_dir(tmp_path, "not-a-partition-dir")
    one_error_line(*cli("import", str(d))[::2], "give --topic and --partition")
    assert cli("import", str(d), "--topic", "other", "--partition", "1")[0] == 0
    assert hw(cli, "other") == {"0": 0, "1": 7}
    one_error_line(*cli("import", str(d), "--topic", "other", "--partition", "1")[::2], "")
    one_error_line(*cli("import", str(tmp_path / "nope"), "--topic", "other", "--partition", "0")[::2],
                   "not a directory")
    one_error_line(*cli("import", str(d), "--topic", "other", "--partition", "5")[::2],
                   "partitions 0..1")


def test_verify_finds_a_flipped_byte(cli):
    cli("topics", "create", "t")
    cli("produce", "t", stdin=jsonl(*({"value": "v%d" % i} for i in range(10))))
    rc, out, err = cli("verify", "t")
    assert rc == 0 and err == "" and ": ok (" in out
    storage = Storage(cli.root)
    [seg] = ManifestStore(storage, "t", 0).latest().segments
    path = seg.paths("t", 0)[".log"]
    data = bytearray(storage.get(path))
    data[len(data) - 3] ^= 0x40
    storage.put(path, bytes(data))
    rc, out, err = cli("verify", "t")
    assert rc == 1
    name = path.rsplit("/", 1)[1]
    assert any(name in line and "offset 0" in line and "position 0" in line
               for line in out.splitlines()), out
    assert err.strip() == "kafkastore: verify found problems in t"


# ---------------------------------------------------------------------------
# bad input: one line, exit 1, no traceback
# ---------------------------------------------------------------------------

def test_bad_input_one_line_errors(cli, tmp_path):
    cli("topics", "create", "t", "--partitions", "2")
    cases = [
        (("consume", "nope"), "unknown topic 'nope'"),
        (("produce", "nope"), "unknown topic 'nope'"),
        (("topics", "describe", "nope"), "unknown topic"),
        (("offsets", "nope"), "unknown topic"),
        (("verify", "nope"), "unknown topic"),
        (("consume", "t", "--partition", "2"), "partitions 0..1, not 2"),
        (("verify", "t", "--partition", "7"), "partition"),
        (("topics", "create", "u", "--config", "retention.ms=soon"), "retention.ms"),
        (("topics", "create", "u", "--config", "no.such=1"), "unknown topic config"),
        (("topics", "create", "u", "--config", "novalue"), "novalue"),
        (("topics", "create", "bad name"), "bad name"),
    ]
    for argv, match in cases:
        one_error_line(*cli(*argv)[::2], match)
    one_error_line(*cli("produce", "t", stdin='{"value": 1}\n{"value": 2\n')[::2], "line 2")
    one_error_line(*cli("topics", "list", root="s3://")[::2], "names no bucket")
    one_error_line(*cli("topics", "list", root="nosuchscheme://x")[::2], "nosuchscheme")
    one_error_line(*cli("--conf", str(tmp_path / "missing.yaml"), "topics", "list")[::2],
                   "does not exist")
    one_error_line(*cli("--conf", str(tmp_path), "topics", "list")[::2], "cannot read config")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("root: [unclosed\n")
    one_error_line(*cli("--conf", str(bad_yaml), "topics", "list")[::2], "not valid YAML")
    assert hw(cli) == {"0": 0, "1": 0}


def test_root_from_environment_and_config_file(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKASTORE_ROOT", cli.root)
    assert cli("topics", "create", "envtopic", root=None)[0] == 0
    monkeypatch.delenv("KAFKASTORE_ROOT")
    conf = tmp_path / "k.yaml"
    conf.write_text(f"root: {cli.root}\n")
    rc, out, _ = cli("--conf", str(conf), "topics", "list", root=None)
    assert (rc, out) == (0, "envtopic\n")


# ---------------------------------------------------------------------------
# the console script
# ---------------------------------------------------------------------------

def script(*argv, stdin: bytes = b"", env_root=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTORE_")}
    if env_root:
        env["KAFKASTORE_ROOT"] = env_root
    return subprocess.run([KAFKASTORE, *argv], input=stdin, capture_output=True, env=env,
                          timeout=120)


def test_console_script(tmp_path):
    root = f"file://{tmp_path}/root"
    assert script("--root", root, "topics", "create", "t", "--partitions", "2").returncode == 0
    p = script("produce", "t", stdin=jsonl({"key": "a", "value": {"x": 1}, "timestamp": 7},
                                           {"value": None, "partition": 0, "timestamp": 8}).encode(),
               env_root=root)
    assert p.returncode == 0, p.stderr
    p = script("--root", root, "consume", "t", "--partition", "0")
    assert p.returncode == 0 and p.stderr == b""
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    want = [{"topic": "t", "partition": 0, "offset": 0, "timestamp": 8, "key": None,
             "value": None, "headers": []}]
    a_part = (kp_default.murmur2(b"a") & 0x7FFFFFFF) % 2
    if a_part == 0:
        want.insert(0, {"topic": "t", "partition": 0, "offset": 0, "timestamp": 7, "key": "a",
                        "value": '{"x":1}', "headers": []})
        want[1]["offset"] = 1
    assert rows == want
    p = script("--root", root, "consume", "missing")
    assert p.returncode == 1 and p.stdout == b""
    assert p.stderr.decode().splitlines() == [
        f"kafkastore: error: unknown topic 'missing' under {root} (topics: t)"]
    p = script("--root", root, "produce", "t", stdin=b'{"value": "ok"}\n[]\n')
    assert p.returncode == 1 and b"Traceback" not in p.stderr
    assert p.stderr.decode().startswith("kafkastore: error: line 2:")
    p = script("--root", root, "no-such-command")
    assert p.returncode == 2                            # usage errors are argparse's


def test_delete_records_truncates_the_start(cli):
    assert cli("topics", "create", "t")[0] == 0
    lines = jsonl(*({"value": str(i)} for i in range(100)))
    assert cli("produce", "t", "--flush-every", "30", stdin=lines)[0] == 0
    rc, _, err = cli("delete-records", "t", "--partition", "0", "--before-offset", "45")
    assert rc == 0 and "0 -> 45" in err
    rc, out, _ = cli("offsets", "t")
    assert json.loads(out)["partitions"]["0"] == {"log_start_offset": 45, "high_watermark": 100}
    one_error_line(*cli("consume", "t", "--from-offset", "10")[::2], match="log start offset 45")
    rc, out, _ = cli("consume", "t")
    assert [r["offset"] for r in consumed(out)] == list(range(45, 100))
    # Past the high watermark: refused, nothing changes. Below the start: a no-op.
    one_error_line(*cli("delete-records", "t", "--partition", "0", "--before-offset", "500")[::2],
                   match="high watermark 100")
    assert cli("delete-records", "t", "--partition", "0", "--before-offset", "5")[0] == 0
    assert json.loads(cli("offsets", "t")[1])["partitions"]["0"]["log_start_offset"] == 45
