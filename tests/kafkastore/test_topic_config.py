"""Topic configs: Kafka's names, defaults and validators."""
from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from kafkastore.errors import ConfigError
from kafkastore.topics.topic_config import CONFIG_KEYS, LONG_MAX, TopicConfig, parse_assignments

KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": 86_400_000,
    "file.delete.delay.ms": 60_000,
    "index.interval.bytes": 4096,
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": 1_048_588,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "retention.bytes": -1,
    "retention.ms": 604_800_000,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "segment.ms": 604_800_000,
}


def test_defaults_are_kafkas():
    full = TopicConfig().to_dict(include_defaults=True)
    for key, value in KAFKA_DEFAULTS.items():
        assert full[key] == value, key
    cfg = TopicConfig()
    assert cfg.to_dict() == {}
    assert (cfg.delete, cfg.compact, cfg.compression_codec) == (True, False, None)
    assert cfg.segment_bytes == 1 << 30 and cfg.retention_ms == 7 * 86_400_000
    assert cfg.file_delete_delay_ms == 60_000 and cfg.min_cleanable_dirty_ratio == 0.5


def test_parse_from_cli_strings():
    cfg = TopicConfig.from_strings([
        "retention.ms=-1", "segment.bytes= 1024 ", "cleanup.policy=delete,compact",
        "min.cleanable.dirty.ratio=0.1", "preallocate=TRUE", "compression.type=ZSTD",
        "message.timestamp.type=logappendtime",
    ])
    assert cfg["retention.ms"] == -1 and cfg.segment_bytes == 1024
    assert cfg.cleanup_policy == ("compact", "delete") and cfg.compact and cfg.delete
    assert cfg.min_cleanable_dirty_ratio == 0.1 and cfg["preallocate"] is True
    assert cfg.compression_type == "zstd" and cfg.compression_codec == "zstd"
    assert cfg.message_timestamp_type == "LogAppendTime"
    assert cfg.describe() == {
        "cleanup.policy": "compact,delete", "compression.type": "zstd",
        "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.1",
        "preallocate": "true", "retention.ms": "-1", "segment.bytes": "1024"}


def test_parse_from_yaml_values():
    doc = yaml.safe_load("""
    cleanup.policy: [compact]
    retention.bytes: 1048576
    min.cleanable.dirty.ratio: 1
    unclean.leader.election.enable: false
    compression.type: none
    """)
    cfg = TopicConfig.from_dict(doc)
    assert cfg.cleanup_policy == ("compact",) and not cfg.delete
    assert cfg.retention_bytes == 1 << 20 and cfg.min_cleanable_dirty_ratio == 1.0
    assert cfg.compression_type == "uncompressed" and cfg.compression_codec == "none"


@pytest.mark.parametrize("key,value,expect", [
    ("segment.bytes", "13", "integer >= 14"),
    ("segment.bytes", "2147483648", "out of range"),
    ("segment.bytes", "1.5", "integer"),
    ("segment.bytes", 1024.0, "integer"),
    ("segment.bytes", True, "integer"),
    ("segment.ms", "0", ">= 1"),
    ("retention.ms", "-2", ">= -1"),
    ("retention.ms", "7d", "integer"),
    ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "nan", "between 0 and 1"),
    ("cleanup.policy", "remove", "compact / delete"),
    ("cleanup.policy", "", "compact / delete"),
    ("compression.type", "brotli", "one of uncompressed, zstd"),
    ("message.timestamp.type", "Now", "CreateTime, LogAppendTime"),
    ("preallocate", "yes", "true or false"),
    ("max.compaction.lag.ms", "0", ">= 1"),
    ("delete.retention.ms", None, ">= 0"),
    ("compression.zstd.level", "23", "between -131072 and 22"),
])
def test_bad_values_name_the_key_and_the_shape(key, value, expect):
    with pytest.raises(ConfigError) as info:
        TopicConfig({key: value})
    assert key in str(info.value) and expect in str(info.value)


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="did you mean 'retention.ms'"):
        TopicConfig({"retention.msec": "1"})
    with pytest.raises(ConfigError, match="unknown topic config 'partitions'"):
        TopicConfig({"partitions": 3})
    with pytest.raises(ConfigError):
        TopicConfig(["retention.ms=1"])


def test_cross_field_rule():
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        TopicConfig({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5})


def test_assignments():
    assert parse_assignments(["a=b=c", "x="]) == {"a": "b=c", "x": ""}
    with pytest.raises(ConfigError, match="key=value"):
        parse_assignments(["retention.ms"])
    with pytest.raises(ConfigError, match="twice"):
        parse_assignments(["retention.ms=1", "retention.ms=2"])


def test_to_dict_round_trip_and_updates():
    cfg = TopicConfig.from_strings(["retention.ms=1000", "cleanup.policy=compact,delete"])
    assert cfg.to_dict() == {"cleanup.policy": "compact,delete", "retention.ms": 1000}
    assert TopicConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    full = cfg.to_dict(include_defaults=True)
    assert set(full) == set(CONFIG_KEYS) and TopicConfig.from_dict(full).to_dict(True) == full
    changed = cfg.with_updates({"segment.ms": "5"}, delete=["retention.ms"])
    assert changed.to_dict() == {"cleanup.policy": "compact,delete", "segment.ms": 5}
    assert changed.is_default("retention.ms") and not changed.is_default("segment.ms")
    assert cfg.to_dict()["retention.ms"] == 1000  # immutable
    with pytest.raises(ConfigError):
        cfg.with_updates(delete=["nope"])
    assert hash(cfg) == hash(TopicConfig({"retention.ms": 1000, "cleanup.policy": ["delete", "compact"]}))


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(sorted(k for k, d in CONFIG_KEYS.items() if d.type in ("int", "long"))),
       value=st.integers(-2 ** 64, 2 ** 64))
def test_integer_configs_validate_like_kafka(key, value):
    d = CONFIG_KEYS[key]
    lo = d.minimum if d.minimum is not None else -2 ** 63
    hi = min(d.maximum if d.maximum is not None else 2 ** 63, 2 ** 31 - 1 if d.type == "int" else 2 ** 63 - 1)
    ok = lo <= value <= hi and not (key == "min.compaction.lag.ms" and value > LONG_MAX)
    try:
        cfg = TopicConfig.from_strings([f"{key}={value}"])
    except ConfigError as exc:
        assert not ok and key in str(exc)
        return
    assert ok and cfg[key] == value and TopicConfig.from_dict(cfg.to_dict()) == cfg
