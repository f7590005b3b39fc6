"""The one reader of Spark option strings (pipelines/spec/spark_options.py) that the data
source, the streaming source and the sink share: names case-insensitive, unset options
skipped, an unknown name refused with the known ones, typed values with their shape."""
from __future__ import annotations

import pytest

from kafkastore.errors import ConfigError
from pipelines.sink.writer import parse_sink_options
from pipelines.source.options import parse_options
from pipelines.source.stream import parse_stream_options
from pipelines.spec.spark_options import (byte_count, gather_options, pick_options,
                                          positive_integer)


def test_pick_matches_names_case_insensitively_and_skips_unset_options():
    picked, rest = pick_options({"MAXBYTES": 5, "other": "x", "gone": None}, ("maxBytes",))
    assert (picked, rest) == ({"maxBytes": "5"}, {"other": "x"})


def test_gather_types_storage_options_drops_ignored_ones_and_refuses_the_rest():
    given, storage = gather_options(
        {"Root": "file:///x", "storage.anon": "true", "storage.n": "3", "kafka.acks": "all",
         "skipMe": "1"}, ("root",), owner="a test", ignored=("kafka.", "skipme"))
    assert (given, storage) == ({"root": "file:///x"}, {"anon": True, "n": 3})
    with pytest.raises(ConfigError, match=r"unknown option 'kafkax' for a test; known options: "
                                          r"root, storage.<key>$"):
        gather_options({"kafkax": "1"}, ("root",), owner="a test", ignored=("kafka.",))


@pytest.mark.parametrize("parse, text, message", [
    (positive_integer, "0", r"option n must be a positive integer, got '0'"),
    (positive_integer, "many", r"option n: expected a positive integer, got 'many'"),
    (byte_count, "lots", r"option n: expected a positive byte count like 134217728 or 128m"),
])
def test_typed_values_show_the_expected_shape(parse, text, message):
    with pytest.raises(ConfigError, match=message):
        parse(text, "n")
    assert positive_integer(" 7 ", "n") == 7 and byte_count("2m", "n") == 2 << 20


@pytest.mark.parametrize("parse, owner", [
    (parse_options, "for the kafkastore source"),
    (parse_stream_options, "for the kafkastore source"),   # the stream passes the rest on
    (parse_sink_options, "for a write into topics"),
])
def test_each_reader_of_options_refuses_an_unknown_name_the_same_way(parse, owner):
    with pytest.raises(ConfigError, match=f"unknown option 'bogus' {owner}; known options: root, "):
        parse({"root": "file:///x", "topic": "t", "bogus": "1"})
