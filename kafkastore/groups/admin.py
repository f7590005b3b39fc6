"""Offline administration of consumer groups, like Kafka's ``kafka-consumer-groups`` tool.

Everything here reads ``__consumer_offsets`` and the topics' manifests under
the root, so it works without a running broker. Live members are known from
the group metadata coordinators persist (rewritten at least every half
session timeout while a group has members): a member counts as live until
its session timeout has passed since the last write.

Changes (delete, reset) are refused while a group has live members, as Kafka
refuses them for groups that are not Empty or Dead.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from ..errors import ConfigError, GroupNotEmptyError, UnknownGroupError, UnknownTopicError
from .offsets import GroupState, OffsetsStore
from .records import OffsetAndMetadata, decode_consumer_assignment
from ..storage import Storage
from ..topics.admin import load_topic, partition_offsets


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def list_groups(storage: Storage) -> list[str]:
    """Every group with metadata or committed offsets."""
    return OffsetsStore(storage).groups()


def _safe_assignment(data: bytes, protocol_type: str) -> dict[str, list[int]]:
    if protocol_type != "consumer" or not data:
        return {}
    try:
        return decode_consumer_assignment(data)
    except Exception:  # noqa: BLE001 - a foreign protocol's bytes: show nothing rather than fail
        return {}


def describe_group(storage: Storage, group: str, *, now_ms: int | None = None) -> dict[str, Any]:
    """Members, assignment, committed offset, log end and lag per partition (JSON-ready)."""
    now = storage.clock.wall_ms() if now_ms is None else now_ms
    st = OffsetsStore(storage).group(group)
    if st.empty:
        raise UnknownGroupError(f"consumer group {group!r} does not exist under {storage.url}")
    meta = st.metadata
    live = meta.live_members(now) if meta is not None else ()
    ptype = meta.protocol_type if meta is not None else ""
    owner: dict[tuple[str, int], str] = {}
    members = []
    for m in live:
        assignment = _safe_assignment(m.assignment, ptype)
        for t, parts in assignment.items():
            for p in parts:
                owner[(t, p)] = m.member_id
        members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "host": m.client_host,
                        "assignment": {t: sorted(ps) for t, ps in sorted(assignment.items())}})
    rows = []
    ends: dict[tuple[str, int], int | None] = {}
    for tp in sorted(set(st.offsets) | set(owner)):
        try:
            ends[tp] = partition_offsets(storage, tp[0], tp[1]).high_watermark
        except (UnknownTopicError, ConfigError):
            ends[tp] = None
        om = st.offsets.get(tp)
        end = ends[tp]
        rows.append({"topic": tp[0], "partition": tp[1],
                     "current_offset": None if om is None else om.offset,
                     "log_end_offset": end,
                     "lag": None if om is None or end is None else max(0, end - om.offset),
                     "member_id": owner.get(tp),
                     "metadata": None if om is None else om.metadata,
                     "commit_timestamp": None if om is None else om.commit_timestamp})
    return {"group": group,
            "state": "Stable" if live else "Empty",
            "protocol_type": ptype,
            "protocol": (meta.protocol if meta is not None and live else None),
            "generation": meta.generation if meta is not None else None,
            "members": members,
            "offsets": rows}


def _refuse_live(st: GroupState, action: str, now: int) -> None:
    if st.metadata is not None and st.metadata.live_members(now):
        n = len(st.metadata.live_members(now))
        raise GroupNotEmptyError(
            f"cannot {action} consumer group {st.group_id!r}: it has {n} live member(s) "
            f"(stop the consumers, or wait for their session timeout)")


def delete_group(storage: Storage, group: str, *, now_ms: int | None = None) -> None:
    """Delete a group's metadata and committed offsets (tombstones in ``__consumer_offsets``)."""
    now = storage.clock.wall_ms() if now_ms is None else now_ms
    store = OffsetsStore(storage)
    st = store.group(group)
    if st.empty:
        raise UnknownGroupError(f"consumer group {group!r} does not exist under {storage.url}")
    _refuse_live(st, "delete", now)
    store.delete_group(group)


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``T`` (every partition) or ``T:0,2`` as in kafka-consumer-groups' ``--topic``."""
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ConfigError(f"--topic {spec!r}: expected TOPIC or TOPIC:P1,P2") from None


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2024-01-02T03:04:05.000``, optional zone; none = UTC)."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--to-datetime {text!r}: expected ISO 8601 like 2024-01-02T03:04:05.000") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    # integer arithmetic: dt.timestamp() * 1000 rounds 1.005 s down to 1004 ms
    return (dt - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class ResetTarget:
    """Where to move a group's offsets: one of earliest / latest / offset / timestamp."""

    kind: str            # "earliest", "latest", "offset", "datetime"
    value: int = 0


def plan_reset(storage: Storage, group: str, topic_spec: str, target: ResetTarget, *,
               now_ms: int | None = None) -> dict[str, Any]:
    """The new offset of every partition (refused while the group has live members)."""
    # lazy: the reader loads pyarrow (~0.4 s), which listing and describing groups never need.
    from ..read.reader import PartitionReader

    now = storage.clock.wall_ms() if now_ms is None else now_ms
    topic, parts = parse_topic_partitions(topic_spec)
    meta = load_topic(storage, topic)
    if parts is None:
        parts = list(range(meta.partitions))
    bad = [p for p in parts if not 0 <= p < meta.partitions]
    if bad:
        raise UnknownTopicError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {bad}")
    st = OffsetsStore(storage).group(group)
    _refuse_live(st, "reset offsets of", now)
    plan = {}
    for p in parts:
        r = PartitionReader(storage, topic, p)
        lo, hi = r.log_start_offset, r.high_watermark
        if target.kind == "earliest":
            new = lo
        elif target.kind == "latest":
            new = hi
        elif target.kind == "offset":
            new = min(max(target.value, lo), hi)  # clamped into the log, as Kafka's tool does
        elif target.kind == "datetime":
            new = r.offset_for_timestamp(target.value)
        else:
            raise ConfigError(f"unknown reset target {target.kind!r}")
        cur = st.offsets.get((topic, p))
        plan[str(p)] = {"current_offset": None if cur is None else cur.offset, "new_offset": new,
                        "log_start_offset": lo, "log_end_offset": hi}
    return {"group": group, "topic": topic, "partitions": plan}


def execute_reset(storage: Storage, plan: dict[str, Any], *, now_ms: int | None = None,
                  clock: Callable[[], int] | None = None) -> None:
    """Commit a plan from :func:`plan_reset` (one manifest commit; liveness checked again)."""
    now = storage.clock.wall_ms() if now_ms is None else now_ms
    store = OffsetsStore(storage, clock=clock)
    group, topic = plan["group"], plan["topic"]
    _refuse_live(store.group(group), "reset offsets of", now)
    store.commit_offsets(group, {(topic, int(p)): OffsetAndMetadata(v["new_offset"], -1, "", now)
                                 for p, v in plan["partitions"].items()})


def reset_offsets(storage: Storage, group: str, topic_spec: str, target: ResetTarget, *,
                  execute: bool = False, now_ms: int | None = None) -> dict[str, Any]:
    """Plan a reset and, with ``execute``, commit it. Returns the plan (``executed`` set)."""
    plan = plan_reset(storage, group, topic_spec, target, now_ms=now_ms)
    if execute:
        execute_reset(storage, plan, now_ms=now_ms)
    plan["executed"] = execute
    return plan


def committed_offsets(storage: Storage, group: str, topics: Sequence[str] | None = None) -> dict[str, dict[int, int]]:
    """``{topic: {partition: committed offset}}`` of a group (the data source's
    ``startingOffsetsFromGroup``); read only, never writes to the group."""
    st = OffsetsStore(storage).group(group)
    out: dict[str, dict[int, int]] = {}
    for (t, p), om in sorted(st.offsets.items()):
        if topics is None or t in topics:
            out.setdefault(t, {})[p] = om.offset
    return out
