"""Group coordinator requests over a raw connection (tests/protocol/wire.py's ``Wire``):
OffsetCommit and OffsetFetch of the two-partition topic ``gt`` the group tests create."""
from __future__ import annotations

import sys

from kafkastore.protocol.wire import codec


def req(api: int, version: int, /, **kw):
    """A request of ``api`` at ``version`` from a superset of its fields."""
    return codec.make(codec.request_class(api, version), **kw)


def part(api: int, version: int, cls: str, /, **kw):
    """A nested entity ``cls`` of that request's schema module."""
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def code(x) -> int:
    """An error code as a plain int."""
    return int(getattr(x, "value", x))


def offset_commit(w, group: str, gen: int, member: str, offsets: dict[int, int]) -> dict[int, int]:
    """OffsetCommit v6 of ``gt``'s partitions; the error code per partition."""
    r = w.call(req(8, 6, group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                   group_instance_id=None, topics=(part(8, 6, "OffsetCommitRequestTopic", name="gt", partitions=tuple(
                       part(8, 6, "OffsetCommitRequestPartition", partition_index=p,
                            committed_offset=o, committed_leader_epoch=-1, committed_metadata="m")
                       for p, o in offsets.items())),)))
    return {p.partition_index: code(p.error_code) for t in r.topics for p in t.partitions}


def offset_fetch(w, group: str, partitions=(0, 1)) -> tuple[int, dict[int, int]]:
    """OffsetFetch v5 of ``gt``'s partitions: the top-level error and the offsets."""
    r = w.call(req(9, 5, group_id=group, require_stable=False, topics=(
        part(9, 5, "OffsetFetchRequestTopic", name="gt", partition_indexes=tuple(partitions)),)))
    return code(r.error_code), {p.partition_index: p.committed_offset
                                for t in r.topics for p in t.partitions}
