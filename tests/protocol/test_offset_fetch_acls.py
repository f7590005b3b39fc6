"""OffsetFetch tells nothing about partitions whose topic the caller may not describe:
offset -1, empty metadata and TOPIC_AUTHORIZATION_FAILED, as Kafka answers."""
from __future__ import annotations

import sys
import time

from kafkastore.acls import Operation, ResourceType as R
from kafkastore.protocol import codec
from kafkastore.storage import Storage
from kafkastore.topics import create_topic

from tests.helpers.acl_broker import (  # noqa: F401 - fixtures
    TOPIC_AUTHORIZATION_FAILED, allow, broker, root, sasl_wire, unique)


def _req(api, version, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def _part(api, version, cls, /, **kw):
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def _code(x) -> int:
    return int(getattr(x, "value", x))


def test_offset_fetch_hides_offsets_of_topics_the_caller_may_not_describe(broker, root):
    secret, group = unique("secret-"), unique("g-")
    create_topic(Storage(root), secret, 1)
    admin = sasl_wire(broker, "admin")
    r = admin.call(_req(8, 6, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        topics=(_part(8, 6, "OffsetCommitRequestTopic", name=secret, partitions=(
                            _part(8, 6, "OffsetCommitRequestPartition", partition_index=0,
                                  committed_offset=4242, committed_leader_epoch=7,
                                  committed_metadata="payroll run 17"),)),)))
    assert _code(r.topics[0].partitions[0].error_code) == 0
    allow(root, R.GROUP, group, Operation.DESCRIBE, who="User:bob")
    bob = sasl_wire(broker, "bob")
    for _ in range(50):   # the grant reaches the broker within its acl_max_age_s
        r = bob.call(_req(9, 5, group_id=group, require_stable=False, topics=(
            _part(9, 5, "OffsetFetchRequestTopic", name=secret, partition_indexes=(0,)),)))
        if _code(r.error_code) == 0:
            break
        time.sleep(0.1)
    assert _code(r.error_code) == 0
    p = r.topics[0].partitions[0]
    assert _code(p.error_code) == TOPIC_AUTHORIZATION_FAILED
    assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (-1, -1, "")
