"""Where a topic's partitions are said to live: stable topic ids and leader placement.

Pure functions shared by Metadata, the admin APIs and the group coordinator (they once
lived in ``apis.meta``, which made ``apis.admin`` and ``apis.meta`` import each other).
"""
from __future__ import annotations

import uuid
import zlib

_TOPIC_ID_NS = uuid.UUID("6f1c2d8e-5b7a-4c1e-9a55-3c0de0f4ab10")


def topic_id(name: str, created_ms: int) -> uuid.UUID:
    """The derived id of a topic created before ids were stored: the same for every broker,
    new when a topic is re-created. Guessable from the name and creation time, so only kept
    for those topics (a client must not see their id change); new topics store a random one."""
    return uuid.uuid5(_TOPIC_ID_NS, f"{name}:{created_ms}")


def topic_id_of(name: str, meta) -> uuid.UUID:
    """A topic's id: the random one stored at its creation, else the derived one."""
    stored = getattr(meta, "topic_id", None)
    return uuid.UUID(hex=stored) if stored else topic_id(name, meta.created_ms)


def leader_for(topic: str, partition: int, brokers: list[tuple[int, str, int]]) -> int:
    """The node to name as a partition's leader: partitions spread round-robin over live brokers,
    starting at a per-topic offset, so every broker computes the same answer."""
    start = zlib.crc32(topic.encode())
    return brokers[(start + partition) % len(brokers)][0]
