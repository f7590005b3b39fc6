"""ACL and quota decisions never use data older than their bound, whatever the traffic: after
an idle spell (or a pause) the first request waits for a fresh read of the shared document
instead of being decided on the copy in hand.

The broker's clock is the storage's; its monotonic reading is moved forward here, as an idle
spell or a pause would, without waiting for it (the background refresh runs on real time and
is set far out of the way, so it cannot read the change for the broker)."""
from __future__ import annotations

import datetime

from kio.schema.delete_records.v2 import request as dr

from kafkastore.cluster.acls import (AclFilter, Operation, ResourceType as R, acl_document,
                                     remove_acls)
from kafkastore.cluster.documents import ClusterDocument
from kafkastore.protocol import quotas as Q
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.acl_broker import TOPIC_AUTHORIZATION_FAILED, acl_options, allow, sasl_wire, unique
from tests.helpers.idle_spell import JumpClock, idle
from tests.helpers.quota_requests import call_as
from tests.helpers.wire_requests import batch, fetch, produce
from tests.protocol.wire import Wire

BOUND_S = 600.0   # the documents' bound: the background refresh never comes round in a test


def _delete_records(w, topic: str) -> int:
    r = w.call(dr.DeleteRecordsRequest(timeout=datetime.timedelta(seconds=10), topics=(
        dr.DeleteRecordsTopic(name=topic, partitions=(
            dr.DeleteRecordsPartition(partition_index=0, offset=0),)),)))
    return int(r.topics[0].partitions[0].error_code)


def _fetch(w, topic: str) -> int:
    return int(fetch(w, topic, 0, 0).error_code)


def _produce(w, topic: str) -> int:
    return produce(w, topic, 0, batch([b"v"]))[0]


def test_a_revoke_refuses_the_next_request_after_an_idle_spell(tmp_path):
    root = f"file://{tmp_path}"
    clock = JumpClock()
    topic = unique("idle-")
    create_topic(Storage(root), topic, 1)
    with BrokerThread(Storage(root, clock=clock), acl_options(acl_max_age_s=BOUND_S)) as broker:
        w = sasl_wire(broker, "alice")
        for call, op in ((_produce, Operation.WRITE), (_fetch, Operation.READ),
                         (_delete_records, Operation.DELETE)):
            allow(root, R.TOPIC, topic, op)
            idle(clock, broker, BOUND_S + 1)
            w = sasl_wire(broker, "alice")
            assert call(w, topic) == 0, call.__name__          # granted, and seen at once
            remove_acls(acl_document(Storage(root)), [AclFilter(R.TOPIC, topic)])
            idle(clock, broker, BOUND_S + 1)                   # idle past the bound
            w = sasl_wire(broker, "alice")
            assert call(w, topic) == TOPIC_AUTHORIZATION_FAILED, call.__name__


def test_quotas_set_during_an_idle_spell_apply_to_the_next_request(tmp_path):
    root = f"file://{tmp_path}"
    clock = JumpClock()
    create_topic(Storage(root), "qt", 1)
    opts = ServeOptions(port=0, quota_refresh_s=BOUND_S / 2)
    with BrokerThread(Storage(root, clock=clock), opts) as broker:
        w = Wire(broker.bootstrap)
        big = batch([b"x" * 10_000] * 3)

        def throttle_s() -> float:
            from kio.schema.produce.v9 import request as p9
            r = call_as(w, p9.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10),
                                             transactional_id=None, topic_data=(
                p9.TopicProduceData(name="qt", partition_data=(
                    p9.PartitionProduceData(index=0, records=big),)),)), "heavy")
            assert int(r.responses[0].partition_responses[0].error_code) == 0
            return r.throttle_time.total_seconds()

        assert throttle_s() == 0
        ClusterDocument(Storage(root), "quotas").update(
            lambda doc: Q.alter(doc, {"client-id": "heavy"}, {Q.PRODUCER_BYTE_RATE: 1000}))
        idle(clock, broker, BOUND_S + 1)
        w = Wire(broker.bootstrap)
        assert throttle_s() > 0
