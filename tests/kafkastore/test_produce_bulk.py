"""`kafkastore produce` in bulk (kafkastore.jsonl_bulk + Broker.send_arrow) against the
per-line reference it replaced: same records, same first error with its line number,
nothing written after a bad line, --flush-every commits at the same counts."""
from __future__ import annotations

import io
import json
import sys

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.write import jsonl_bulk
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.cli.entry import main
from kafkastore.errors import (ConfigError, InvalidRecordError, KafkaStoreError,
                               RecordTooLargeError, UnknownTopicError)
from kafkastore.write.jsonl import parse_produce_line
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

PARTITIONS = 3


def reference_produce(storage, topic, data: bytes, flush_every: int | None):
    """The per-line implementation `produce` had before the bulk path: (error or None)."""
    atomic = not flush_every
    broker = Broker(storage, commit_on_roll=not atomic)
    lines = []
    for lineno, raw in enumerate(io.BytesIO(data), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            lines.append((lineno, ConfigError(f"line {lineno}: not UTF-8 ({exc.reason} at "
                                              f"byte {exc.start})")))
            break
        if line.strip():
            lines.append((lineno, line))
    parsed = []
    try:
        for lineno, line in lines:
            if isinstance(line, Exception):
                raise line
            rec = parse_produce_line(line, lineno)
            if not atomic:
                parsed = [(lineno, rec)]
                _send(broker, topic, parsed, flush_every)
            else:
                parsed.append((lineno, rec))
        if atomic:
            _send(broker, topic, parsed, None)
        broker.flush()
    except KafkaStoreError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. a lone surrogate before jsonl refuses it
        return f"{type(exc).__name__}: {exc}"
    return None


_sent = {"n": 0}


def _send(broker, topic, recs, flush_every):
    for lineno, rec in recs:
        try:
            broker.send(topic, rec.value, key=rec.key, headers=rec.headers,
                        timestamp=rec.timestamp, partition=rec.partition)
        except (ConfigError, InvalidRecordError, RecordTooLargeError, UnknownTopicError) as exc:
            raise type(exc)(f"line {lineno}: {exc}") from None
        _sent["n"] += 1
        if flush_every and _sent["n"] % flush_every == 0:
            broker.flush()


def log_of(storage, topic):
    """Every record as (key, value, headers, timestamp if set by the line), by partition
    for keyed or placed records (null-key placement is random, sticky)."""
    out = []
    for p in range(PARTITIONS):
        t = PartitionReader(storage, topic, p).read(-2, include_headers=True)
        for k, v, ts, hs in zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                                t.column("timestamp").cast("int64").to_pylist(),
                                t.column("headers").to_pylist()):
            out.append((p if k is not None else None, k, v,
                        tuple((h["key"], h["value"]) for h in hs or ()),
                        ts // 1000 if ts // 1000 < 1_000_000 else None))
    return sorted(out, key=repr)


def run_cli(root, topic, data: bytes, flush_every, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    capsys.readouterr()
    argv = ["--root", root, "produce", topic] + (["--flush-every", str(flush_every)]
                                                  if flush_every else [])
    try:
        rc = main(argv)
    except Exception as exc:  # noqa: BLE001 - the same crash as the reference, if any
        return f"{type(exc).__name__}: {exc}"
    err = capsys.readouterr().err.strip()
    return None if rc == 0 else err.removeprefix("kafkastore: error: ")


good_line = st.fixed_dictionaries(
    {"value": st.one_of(st.none(), st.text(max_size=20), st.integers(), st.just({"a": [1]}))},
    optional={"key": st.one_of(st.none(), st.text(max_size=6),
                               st.just({"base64": "AAEC"})),
              "timestamp": st.integers(0, 999_999),
              "partition": st.integers(0, PARTITIONS - 1),
              "headers": st.lists(st.tuples(st.text(max_size=3),
                                            st.one_of(st.none(), st.text(max_size=3))),
                                  max_size=2).map(lambda hs: [list(h) for h in hs])})
bad_line = st.sampled_from([
    b'{"value": "x", "partition": 7}', b'{"key": "k"}', b'not json', b'[1, 2]',
    b'{"value": "x", "timestamp": -1}', b'{"value": "x", "timestamp": 1.5}',
    b'{"value": "x", "extra": 1}', b'{"value": "\xff"}', b'{"value": "a"}{"value": "b"}',
    b'', b'   ', b'{"value": "x", "headers": [["h"]]}', b'{"value": "\\ud800"}',
    b'{"value": "x", "value": "y"}', b'{"value": "x", "partition": -1}',
    b'\xef\xbb\xbf{"value": "x"}', b'{"value": "\\\\ud800"}',
])


def encode_line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=bool(len(str(obj)) % 2)).encode()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(good_line.map(encode_line), bad_line), min_size=1, max_size=25),
       flush_every=st.sampled_from([None, 1, 4]), chunk=st.sampled_from([16, 64, 1 << 20]),
       crlf=st.booleans(), final_newline=st.booleans(), native=st.booleans())
def test_bulk_produce_matches_per_line_reference(tmp_path_factory, monkeypatch, capsys,
                                                 lines, flush_every, chunk, crlf,
                                                 final_newline, native):
    # Both bulk parsers: the C fast path where it takes a chunk, and pyarrow's reader.
    monkeypatch.setattr(jsonl_bulk, "NATIVE_PARSE", native and jsonl_bulk.NATIVE_PARSE)
    data = (b"\r\n" if crlf else b"\n").join(lines) + (b"\n" if final_newline else b"")
    root = tmp_path_factory.mktemp("bulk").as_uri()
    ref_storage, cli_storage = Storage(root + "/ref"), Storage(root + "/cli")
    for s in (ref_storage, cli_storage):
        create_topic(s, "t", PARTITIONS)
    monkeypatch.setattr(jsonl_bulk, "CHUNK_BYTES", chunk)
    _sent["n"] = 0
    want_err = reference_produce(ref_storage, "t", data, flush_every)
    got_err = run_cli(root + "/cli", "t", data, flush_every, monkeypatch, capsys)
    got_log = log_of(cli_storage, "t")
    # A run that stops after committing says what it committed (the reference predates that).
    if got_err is not None and " -- stopped after committing " in got_err:
        got_err, stopped = got_err.split(" -- stopped after committing ", 1)
        assert int(stopped.split(" record(s)", 1)[0]) == len(got_log)
    assert got_err == want_err
    assert got_log == log_of(ref_storage, "t")


def test_bulk_path_is_taken_for_plain_lines_and_tombstones():
    chunk = b'{"key":"a","value":"x","timestamp":5}\n{"key":"b","value":null}\n'
    parsed = jsonl_bulk.parse_chunk(chunk, 10)
    assert parsed.bulk and parsed.error is None and list(parsed.lines) == [10, 11]
    assert parsed.table.column("value").to_pylist() == [b"x", None]
    not_utf8 = jsonl_bulk.parse_chunk(b'{"value":"x"}\n{"value":"\xff"}', 1)
    assert not not_utf8.bulk and str(not_utf8.error).startswith("line 2: not UTF-8")
    missing = jsonl_bulk.parse_chunk(b'{"key":"a","value":"x"}\n{"key":"b"}\n', 1)
    assert not missing.bulk and "line 2" in str(missing.error)
    assert missing.table.num_rows == 1


class _ReadOnly:
    """A stream with ``read`` only (as a text stdin wrapped to bytes), short reads included."""

    def __init__(self, data: bytes):
        self.f = io.BytesIO(data)

    def read(self, n: int) -> bytes:
        return self.f.read(max(1, n // 2))


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.sampled_from([b"a", b"\n", b"bb", b"c" * 9]), max_size=40).map(b"".join),
       chunk=st.integers(1, 16), readinto=st.booleans())
def test_iter_chunks_keeps_lines_whole_and_numbers_them(data, chunk, readinto):
    stream = io.BytesIO(data) if readinto else _ReadOnly(data)
    # The chunk's memory is reused for the next: copy each one before asking for the next.
    chunks = [(n, bytes(c), k) for n, c, k in jsonl_bulk.iter_chunks(stream, chunk)]
    assert b"".join(c for _, c, _ in chunks) == data
    assert all(c and c.endswith(b"\n") for _, c, _ in chunks[:-1])
    assert [k for _, _, k in chunks] == [c.count(b"\n") for _, c, _ in chunks]
    first = [n for n, _, _ in chunks]
    assert first == [1 + b"".join(c for _, c, _ in chunks[:i]).count(b"\n") for i in range(len(chunks))]


def test_iter_chunks_survives_a_view_kept_of_the_last_chunk():
    data = b"".join(b"line %d\n" % i for i in range(100))
    kept, out = [], []
    for _, chunk, _ in jsonl_bulk.iter_chunks(io.BytesIO(data), 16):
        out.append(bytes(chunk))
        kept.append(memoryview(chunk))   # the buffer cannot be resized in place any more
    assert b"".join(out) == data


# -- the C fast path -------------------------------------------------------------------------
native = pytest.mark.skipif(not jsonl_bulk.NATIVE_PARSE, reason="the C extension is not built")


def per_line(data: bytes):
    """What the per-line parser makes of every line: [(key, value, timestamp, partition)] with
    no headers, or None if some line is refused, blank, or has headers."""
    rows = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if raw == b"" and lineno == data.count(b"\n") + 1:
            break                      # after the last newline
        try:
            rec = parse_produce_line(raw.decode("utf-8"), lineno)
        except (KafkaStoreError, UnicodeDecodeError):
            return None
        if rec.headers:
            return None
        rows.append((rec.key, rec.value, rec.timestamp, rec.partition))
    return rows


def c_path(data: bytes):
    nlines = data.count(b"\n") + (not data.endswith(b"\n"))
    table = jsonl_bulk._native_table(data, nlines)
    if table is None:
        return None
    table.validate(full=True)
    cols = [table.column(c).to_pylist() for c in ("key", "value", "timestamp", "partition")]
    return list(zip(*cols))


MAX_TS = (2 ** 63 - 1) // 1000
json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
common_line = st.fixed_dictionaries(
    {"value": st.one_of(st.none(), json_text)},
    optional={"key": st.one_of(st.none(), json_text),
              "timestamp": st.one_of(st.none(), st.integers(0, MAX_TS), st.just(MAX_TS)),
              "partition": st.one_of(st.none(), st.integers(0, 2 ** 31 - 1)),
              "headers": st.sampled_from([None, []]),
              "topic": st.one_of(st.none(), json_text),
              "offset": st.one_of(st.none(), st.integers(0, 2 ** 63 - 1))})
def spell(obj, ensure_ascii: bool, spaced: bool) -> bytes:
    text = json.dumps(obj, ensure_ascii=ensure_ascii,
                      separators=(", ", ": ") if spaced else (",", ":"))
    return (" \t" + text + " \r" if spaced else text).encode()


@native
@settings(max_examples=300, deadline=None)
@given(objs=st.lists(common_line, min_size=1, max_size=6), ascii_=st.booleans(),
       spaced=st.booleans(), last_newline=st.booleans())
def test_c_path_takes_common_lines_and_reads_them_as_the_per_line_parser(
        objs, ascii_, spaced, last_newline):
    data = b"\n".join(spell(o, ascii_, spaced) for o in objs) + (b"\n" if last_newline else b"")
    assert c_path(data) == per_line(data)
    assert c_path(data) is not None


@native
@settings(max_examples=1500, deadline=None)
@given(data=st.lists(st.one_of(
    st.sampled_from([b'{"value":"x"}', b'{"key":null,"value":null}', b"{", b"}", b'"', b"\\",
                     b"\\u", b"\\ud83d\\ude00", b"\\ud83d\\ue000", b"\\udc00", b"\\u00e9", b"\\n",
                     b"null", b"[]", b"[1]",
                     b'"value"', b'"key"', b'"timestamp"', b'"headers"', b'"offset"', b":", b",",
                     b" ", b"\t", b"\r", b"\n", b"0", b"01", b"-1", b"1.5", b"1e3", b"12",
                     b"99999999999999999999", b"true", b"\xc3\xa9", b"\xed\xa0\x80", b"\xff",
                     b"\xef\xbb\xbf", b"\x00", b"\x7f", b'{"base64":"AA=="}']),
    st.binary(max_size=3)), max_size=24).map(b"".join))
def test_c_path_never_reads_a_line_otherwise_than_the_per_line_parser(data):
    """Fuzzed lines: whatever the C path takes, the per-line parser reads the same way."""
    got = c_path(data)
    if got is not None:
        assert got == per_line(data)


@native
def test_c_path_leaves_the_unusual_to_the_other_parsers():
    taken = b'{"key": "k", "value": "v", "timestamp": 5, "partition": 0, "headers": [], ' \
            b'"topic": "t", "offset": 9}'
    assert c_path(taken) == [(b"k", b"v", 5, 0)]
    assert c_path(b'{"value": "\\ud83d\\ude00"}') == [(None, "\U0001f600".encode(), None, None)]
    for line in [b'{"key": {"base64": "AAEC"}, "value": "x"}', b'{"value": 5}',
                 b'{"value": "x", "headers": [["h", "v"]]}', b'{"value": "\\ud83d"}',
                 b'{"value": "\\ud83d\\ue000"}',
                 b'{"value": "x", "timestamp": 01}', b'{"value": "x", "partition": 00}',
                 b'{"value": "x", "timestamp": -0}', b'{"value": "x", "timestamp": 5.0}',
                 b'{"value": "x", "timestamp": %d}' % (MAX_TS + 1),
                 b'{"value": "x", "partition": 2147483648}', b'{"value": "x", "value": "y"}',
                 b'{"key": "k"}', b'\xef\xbb\xbf{"value": "x"}', b'{"value": "x"}\n\n',
                 b'{"value": "\xed\xa0\x80"}', b'{"val\\u0075e": "x"}', b'{"value": "a\tb"}']:
        assert c_path(line) is None, line
    chunk = b'{"key":"a","value":"x","timestamp":5}\n{"key":"b","value":null}\n'
    parsed = jsonl_bulk.parse_chunk(chunk, 10)
    assert parsed.native and parsed.error is None and list(parsed.lines) == [10, 11]


class _Failing:
    """A stream that breaks after its first read."""

    def __init__(self, first: bytes):
        self.reads = [first]

    def read(self, n: int) -> bytes:
        if self.reads:
            return self.reads.pop()
        raise OSError("the pipe broke")


def test_parse_ahead_hands_over_chunks_in_order_then_the_readers_error():
    lines = b"".join(b'{"value":"%d"}\n' % i for i in range(50))
    got = list(jsonl_bulk.parse_ahead(io.BytesIO(lines), 64))
    assert [v for p in got for v in p.table.column("value").to_pylist()] == \
        [b"%d" % i for i in range(50)]
    assert [int(n) for p in got for n in p.lines] == list(range(1, 51))
    first = b'{"value":"a"}\n'
    chunks = jsonl_bulk.parse_ahead(_Failing(first), len(first))
    assert next(chunks).table.num_rows == 1
    with pytest.raises(OSError, match="the pipe broke"):
        next(chunks)


def test_parse_ahead_stops_at_the_first_bad_chunk():
    data = b'{"value":"a"}\n' * 10 + b'not json\n' + b'{"value":"b"}\n' * 10
    got = list(jsonl_bulk.parse_ahead(io.BytesIO(data), 32))
    assert got[-1].error is not None and "line 11" in str(got[-1].error)
    assert sum(p.table.num_rows for p in got) == 10


def test_a_blank_line_cannot_hide_a_line_of_two_objects(monkeypatch):
    """Two objects on line 1 and a blank line 2 make as many rows as lines: still refused."""
    monkeypatch.setattr(jsonl_bulk, "NATIVE_PARSE", False)
    for blank in (b"\n", b" \t\n", b"\r\n"):
        parsed = jsonl_bulk.parse_chunk(b'{"value": "a"}{"value": "b"}\n' + blank, 1)
        assert not parsed.bulk and str(parsed.error).startswith("line 1: not valid JSON")
        assert parsed.table.num_rows == 0
    trailing = jsonl_bulk.parse_chunk(b'{"value": "a"}{"value": "b"}\n  ', 1)
    assert not trailing.bulk and str(trailing.error).startswith("line 1: not valid JSON")


# -- top-level values that are not objects -----------------------------
_NOT_OBJECTS = [b"null", b"0", b"-1.5", b"12345678901234567890", b'"s"', b'""', b"[]",
                b'[{"value": "a"}]', b"true", b"false"]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # set per example
@given(lines=st.lists(st.one_of(
           st.text(max_size=8).map(lambda v: json.dumps({"value": v}).encode()),
           st.tuples(st.sampled_from(["", " ", "\t"]), st.sampled_from(_NOT_OBJECTS))
             .map(lambda t: t[0].encode() + t[1])),
       min_size=1, max_size=12),
       final_newline=st.booleans(), native=st.booleans())
def test_a_top_level_non_object_anywhere_in_a_chunk_is_line_n_expected_an_object(
        monkeypatch, lines, final_newline, native):
    """pyarrow's reader crashed the process on a top-level null starting its input: every
    line that is not an object reaches the per-line parser and its one-line error."""
    monkeypatch.setattr(jsonl_bulk, "NATIVE_PARSE", native and jsonl_bulk.NATIVE_PARSE)
    chunk = b"\n".join(lines) + (b"\n" if final_newline else b"")
    parsed = jsonl_bulk.parse_chunk(chunk, 1)
    bad = [i for i, line in enumerate(lines) if not line.startswith(b"{")]
    if not bad:
        assert parsed.error is None and parsed.table.num_rows == len(lines)
        return
    assert str(parsed.error).startswith(f"line {bad[0] + 1}: expected a JSON object")
    assert parsed.table.num_rows == bad[0]


@pytest.mark.parametrize("token", [b"null", b"5", b'"s"', b"[1]", b"true"])
@pytest.mark.parametrize("where", ["alone", "starts a chunk", "mid chunk"])
def test_cli_produce_of_a_non_object_line_is_one_line_error_not_a_crash(tmp_path, token, where):
    """In a subprocess, so a segfault (exit 139) fails the test instead of killing it."""
    import subprocess

    root = (tmp_path / "root").as_uri()
    create_topic(Storage(root), "t", 1)
    good = b'{"value": "a"}\n'
    if where == "alone":
        data, lineno = token + b"\n", 1
    elif where == "starts a chunk":  # the first chunk is exactly 4 MiB of whole lines
        line = b'{"value": "ab"}\n'
        assert jsonl_bulk.CHUNK_BYTES % len(line) == 0
        n = jsonl_bulk.CHUNK_BYTES // len(line)
        data, lineno = line * n + token + b"\n", n + 1
    else:
        data, lineno = good * 3 + token + b"\n" + good, 4
    proc = subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, "produce", "t"],
                          input=data, capture_output=True, timeout=120)
    err = proc.stderr.decode().strip()
    assert proc.returncode == 1, (proc.returncode, err[-500:])
    assert err.splitlines() == [f"kafkastore: error: line {lineno}: expected a JSON object like "
                                '{"key": ..., "value": ...}']
    assert PartitionReader(Storage(root), "t", 0).high_watermark == 0   # nothing committed
