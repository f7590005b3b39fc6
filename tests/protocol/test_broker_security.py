"""Metadata advertises only brokers of the listener's security protocol."""
from __future__ import annotations

from kio.schema.metadata.v12 import request as md_req
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.mixed_security import brokers, plain, sasl

from .wire import Wire

METADATA = md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name="sec", topic_id=None),),
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_metadata_lists_only_brokers_with_the_same_security(tmp_path):
    root = f"file://{tmp_path}/r"
    create_topic(Storage(root), "sec", 4)
    with brokers(root, plain(), sasl(), plain()) as (a, b, c):
        ids = {br: br.server.node_id for br in (a, b, c)}
        assert sorted(n for n, _, _ in a.server.live_brokers()) == sorted(ids.values())
        w = Wire(a.bootstrap)
        r = w.call(METADATA)
        w.close()
        assert sorted(x.node_id for x in r.brokers) == sorted([ids[a], ids[c]])
        assert {p.leader_id for p in r.topics[0].partitions} <= {ids[a], ids[c]}
        w = Wire(b.bootstrap)
        assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
        assert int(w.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0pw")).error_code) == 0
        r = w.call(METADATA)
        w.close()
        assert [x.node_id for x in r.brokers] == [ids[b]]
        assert {p.leader_id for p in r.topics[0].partitions} == {ids[b]}
