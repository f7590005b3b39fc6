"""JSON lines of `produce` and `consume` (DESIGN.md section 7)."""
from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.errors import ConfigError
from kafkastore.write.jsonl import (MAX_TIMESTAMP_MS, ProduceRecord, format_consume_record,
                                    parse_produce_line, text_or_base64)


def parse(obj, lineno=1):
    return parse_produce_line(json.dumps(obj), lineno)


def test_full_line():
    rec = parse({"key": "k", "value": "v", "headers": [["a", "1"], ["b", None]],
                 "timestamp": 1700000000000, "partition": 2})
    assert rec == ProduceRecord(b"k", b"v", (("a", b"1"), ("b", None)), 1700000000000, 2)


def test_only_value_required():
    assert parse({"value": "v"}) == ProduceRecord(None, b"v", (), None, None)
    assert parse({"value": None}) == ProduceRecord(None, None, (), None, None)   # a tombstone
    assert parse({"value": "v", "headers": None}).headers == ()


@pytest.mark.parametrize("value, expected", [
    ({"b": 1, "a": [1, 2.5, None]}, b'{"b":1,"a":[1,2.5,null]}'),   # compact, order kept
    ({"t": "é"}, '{"t":"é"}'.encode()),                               # not \\u-escaped
    ([1, 2], b"[1,2]"),
    (5, b"5"),
    (True, b"true"),
    ("text", b"text"),
    ("", b""),
    ({"base64": base64.b64encode(b"\xff\x00").decode()}, b"\xff\x00"),
])
def test_value_forms(value, expected):
    assert parse({"value": value}).value == expected


def test_base64_for_keys_and_headers():
    rec = parse({"key": {"base64": "AAE="}, "value": "v", "headers": [["h", {"base64": "/w=="}]]})
    assert rec.key == b"\x00\x01" and rec.headers == (("h", b"\xff"),)


def test_consume_fields_are_accepted_and_ignored():
    line = format_consume_record("t", 1, 42, 1000, b"k", b"v", [("h", b"x")])
    rec = parse_produce_line(line, 1)
    assert rec == ProduceRecord(b"k", b"v", (("h", b"x"),), 1000, 1)


@pytest.mark.parametrize("line, match", [
    ("not json", "line 7: not valid JSON"),
    ('{"value": "v"', "line 7: not valid JSON"),
    ("[1, 2]", "line 7: expected a JSON object"),
    ('{"key": "k"}', 'line 7: missing "value"'),
    ('{"value": "v", "vaule": 1}', r"unknown field\(s\) \['vaule'\]"),
    ('{"value": "v", "key": 5}', "key must be a string"),
    ('{"value": "v", "key": {"x": 1}}', "key must be a string"),
    ('{"value": {"base64": "***"}}', "invalid base64"),
    ('{"value": "v", "headers": {"a": "b"}}', "headers must be a list"),
    ('{"value": "v", "headers": [["a"]]}', "each header"),
    ('{"value": "v", "headers": [[1, "x"]]}', "each header"),
    ('{"value": "v", "headers": [["a", 5]]}', "header value must be"),
    ('{"value": "v", "timestamp": -1}', "timestamp"),
    ('{"value": "v", "timestamp": 1.5}', "timestamp"),
    ('{"value": "v", "timestamp": "1"}', "timestamp"),
    ('{"value": "v", "timestamp": true}', "timestamp"),
    ('{"value": "v", "timestamp": %d}' % (MAX_TIMESTAMP_MS + 1), "timestamp"),
    ('{"value": "v", "partition": -1}', "partition"),
    ('{"value": "v", "partition": "0"}', "partition"),
    ('{"value": "v", "partition": false}', "partition"),
])
def test_bad_lines(line, match):
    with pytest.raises(ConfigError, match=match) as ei:
        parse_produce_line(line, 7)
    assert str(ei.value).startswith("line 7: ")
    assert "\n" not in str(ei.value)


def test_largest_timestamp_accepted():
    assert parse({"value": "v", "timestamp": MAX_TIMESTAMP_MS}).timestamp == MAX_TIMESTAMP_MS
    assert parse({"value": "v", "timestamp": 0}).timestamp == 0


def test_text_or_base64():
    assert text_or_base64(None) is None
    assert text_or_base64(b"") == ""
    assert text_or_base64("é".encode()) == "é"
    assert text_or_base64(b"\xff\xfe") == {"base64": "//4="}
    assert text_or_base64(b"\xc3") == {"base64": "ww=="}            # truncated UTF-8


def test_consume_line_exact():
    line = format_consume_record("orders", 2, 17, 1700000000123, None, b"\xff",
                                 [("h", None), ("t", "é".encode())])
    assert line == ('{"topic":"orders","partition":2,"offset":17,"timestamp":1700000000123,'
                    '"key":null,"value":{"base64":"/w=="},"headers":[["h",null],["t","é"]]}')
    assert list(json.loads(line)) == ["topic", "partition", "offset", "timestamp", "key", "value",
                                      "headers"]
    assert "\n" not in format_consume_record("t", 0, 0, 0, b"a\nb", b"\n", [])


@settings(max_examples=200, deadline=None)
@given(key=st.none() | st.binary(max_size=20), value=st.none() | st.binary(max_size=40),
       headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)),
                        max_size=3),
       ts=st.integers(0, MAX_TIMESTAMP_MS), partition=st.integers(0, 100))
def test_consume_output_produces_the_same_bytes(key, value, headers, ts, partition):
    line = format_consume_record("t", partition, 5, ts, key, value, headers)
    rec = parse_produce_line(line, 1)
    assert rec == ProduceRecord(key, value, tuple(headers), ts, partition)
