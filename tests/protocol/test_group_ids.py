"""Group ids and other stored client strings too long for a group record:
refused at once with Kafka's error, no traceback, nothing for the client to retry."""
from __future__ import annotations

import logging
import sys
import time

from kafkastore.protocol.wire import codec
from kafkastore.protocol.coordinators import group as G
from kafkastore.protocol.apis.groups import MAX_STRING_BYTES
from kafkastore.topics.admin import create_topic

from .wire import Wire

LONG = "g" * (MAX_STRING_BYTES + 1)


def req(api: int, version: int, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def part(api: int, version: int, cls: str, /, **kw):
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def code(x) -> int:
    return int(getattr(x, "value", x))
INVALID_REQUEST = 42


def _no_tracebacks(caplog):
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def test_long_group_id_is_invalid_on_the_wire(broker, storage, caplog):
    caplog.set_level(logging.INFO, logger="kafkastore")
    create_topic(storage, "gid", 1)
    w = Wire(broker.bootstrap)
    r = w.call(req(10, 4, key_type=0, coordinator_keys=(LONG, "fine")))
    assert [code(c.error_code) for c in r.coordinators] == [G.INVALID_GROUP_ID, G.NONE]
    r = w.call(req(11, 9, group_id=LONG, session_timeout=6000, rebalance_timeout=3000, member_id="",
                   group_instance_id=None, protocol_type="consumer", reason=None,
                   protocols=(part(11, 9, "JoinGroupRequestProtocol", name="range", metadata=b""),)))
    assert code(r.error_code) == G.INVALID_GROUP_ID
    r = w.call(req(8, 8, group_id=LONG, generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None,
                   topics=(part(8, 8, "OffsetCommitRequestTopic", name="gid", partitions=(
                       part(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                            committed_leader_epoch=-1, committed_metadata=None),)),)))
    assert code(r.topics[0].partitions[0].error_code) == G.INVALID_GROUP_ID
    r = w.call(req(15, 5, groups=(LONG,), include_authorized_operations=False))
    assert code(r.groups[0].error_code) == G.INVALID_GROUP_ID
    # Other strings a group record stores: the static member id (group.instance.id).
    r = w.call(req(11, 9, group_id="ok-group", session_timeout=6000, rebalance_timeout=3000, member_id="",
                   group_instance_id=LONG, protocol_type="consumer", reason=None,
                   protocols=(part(11, 9, "JoinGroupRequestProtocol", name="range", metadata=b""),)))
    assert code(r.error_code) == INVALID_REQUEST
    w.close()
    time.sleep(0.3)  # background group writes, if any had been queued
    _no_tracebacks(caplog)

