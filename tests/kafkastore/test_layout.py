"""kafkastore.layout: where topics, segments and manifests live under a root."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastore import layout
from kafkastore.errors import ConfigError


def test_paths_under_a_root():
    assert layout.topic_meta_path("orders") == "topics/orders/_topic.json"
    assert layout.partition_dir("orders", 3) == "topics/orders/3"
    assert layout.manifest_path("orders", 3, 12) == "topics/orders/3/_manifest/00000000000000000012.json"
    assert layout.segment_path("orders", 0, 42, "ab12", ".timeindex") == \
        "topics/orders/0/00000000000000000042-ab12.timeindex"


def test_segment_path_refuses_other_extensions():
    with pytest.raises(ConfigError, match="segment extension"):
        layout.segment_path("orders", 0, 0, "ab12", ".txt")


@given(base=st.integers(0, 2**63 - 1), ext=st.sampled_from(layout.SEGMENT_EXTENSIONS))
def test_segment_names_parse_back(base, ext):
    sid = layout.new_segment_id()
    path = layout.segment_path("t", 1, base, sid, ext)
    assert layout.parse_segment_name(path) == (base, sid, ext)


@pytest.mark.parametrize("name", ["0-ab.log", "00000000000000000000-ab.log.deleted",
                                  "00000000000000000000-a_b.log", "_manifest",
                                  "00000000000000000000.log"])
def test_other_files_are_not_segments(name):
    assert layout.parse_segment_name(name) is None


def test_segment_ids_are_unique():
    assert len({layout.new_segment_id() for _ in range(1000)}) == 1000


@pytest.mark.parametrize("name", ["orders", "a.b_c-9", "x" * 249, "__consumer_offsets"])
def test_kafka_topic_names_are_accepted(name):
    assert layout.validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a/b", "a b", "ü", None, 5])
def test_other_topic_names_are_config_errors(name):
    with pytest.raises(ConfigError, match="invalid topic name"):
        layout.validate_topic_name(name)
