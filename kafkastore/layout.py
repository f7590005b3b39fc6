"""Where things live under a root (DESIGN.md section 2).

    <root>/topics/<topic>/_topic.json
    <root>/topics/<topic>/<partition>/<20-digit base offset>-<unique id>.{log,index,timeindex}
    <root>/topics/<topic>/<partition>/_manifest/<20-digit version>.json
    <root>/topics/<topic>/<partition>/_manifest/_last_checkpoint.json   (hint: newest full version)

All paths are relative to the root and use ``/``.
"""
from __future__ import annotations

import re
import uuid

from .errors import ConfigError

TOPICS_DIR = "topics"
MANIFEST_DIR = "_manifest"
#: Names the newest full manifest version (a hint, overwritten; never a commit point). Its
#: name is not 20 digits, so it is never taken for a version.
MANIFEST_HINT = "_last_checkpoint.json"
TOPIC_META = "_topic.json"
SEGMENT_EXTENSIONS = (".log", ".index", ".timeindex")

# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_SEGMENT_RE = re.compile(r"^(\d{20})-([0-9a-zA-Z]+)\.(log|index|timeindex)$")


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if Kafka would accept it as a topic name, else raise ConfigError."""
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise ConfigError(
            f"invalid topic name {topic!r}: expected 1-249 characters of [a-zA-Z0-9._-]")
    return topic


def offset_name(offset: int) -> str:
    """The 20-digit zero-padded form Kafka uses in file names."""
    return f"{offset:020d}"


def new_segment_id() -> str:
    """A unique id that keeps two racing writers' files apart."""
    return uuid.uuid4().hex[:16]


def topic_dir(topic: str) -> str:
    return f"{TOPICS_DIR}/{topic}"


def topic_meta_path(topic: str) -> str:
    return f"{TOPICS_DIR}/{topic}/{TOPIC_META}"


def partition_dir(topic: str, partition: int) -> str:
    return f"{TOPICS_DIR}/{topic}/{partition}"


def manifest_dir(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/{MANIFEST_DIR}"


def manifest_path(topic: str, partition: int, version: int) -> str:
    return f"{manifest_dir(topic, partition)}/{offset_name(version)}.json"


def manifest_hint_path(topic: str, partition: int) -> str:
    """Path of the hint naming the newest full manifest version."""
    return f"{manifest_dir(topic, partition)}/{MANIFEST_HINT}"


def segment_stem(base_offset: int, segment_id: str) -> str:
    return f"{offset_name(base_offset)}-{segment_id}"


def segment_path(topic: str, partition: int, base_offset: int, segment_id: str, ext: str) -> str:
    """Path of one segment file; ``ext`` is ``.log``, ``.index`` or ``.timeindex``."""
    if ext not in SEGMENT_EXTENSIONS:
        raise ConfigError(f"segment extension must be one of {SEGMENT_EXTENSIONS}, got {ext!r}")
    return f"{partition_dir(topic, partition)}/{segment_stem(base_offset, segment_id)}{ext}"


def parse_segment_name(name: str) -> tuple[int, str, str] | None:
    """``(base_offset, segment_id, ext)`` for a segment file name, else None."""
    m = _SEGMENT_RE.match(name.rsplit("/", 1)[-1])
    if not m:
        return None
    return int(m.group(1)), m.group(2), "." + m.group(3)
