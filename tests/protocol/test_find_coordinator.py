"""FindCoordinator v6: Kafka 3.9 serves FindCoordinator 0-6, v6 adding the
share-group key type (KIP-932). Groups (key type 0) and transactional ids (key type 1) are
answered at v6 exactly as at v4-5; a share key (type 2) gets what a 3.9 broker answers
(KafkaApis.getCoordinator): INVALID_REQUEST below v6, CLUSTER_AUTHORIZATION_FAILED without
CLUSTER_ACTION on the cluster, else COORDINATOR_NOT_AVAILABLE (3.9 has no share coordinator)."""
from __future__ import annotations

import struct
import time
import urllib.request
import uuid

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindV4
from kio.schema.find_coordinator.v5.request import FindCoordinatorRequest as FindV5
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest as FindV6
from prometheus_client.parser import text_string_to_metric_families

from kafkastore.cluster.acls import Operation, ResourceType as R
from kafkastore.protocol.wire import codec
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.mixed_security import brokers, plain, sasl

from tests.helpers.acl_broker import allow, broker as acl_broker, root, sasl_wire, unique  # noqa: F401 - fixtures
from .wire import Wire

GROUP, TRANSACTION, SHARE = 0, 1, 2
COORDINATOR_NOT_AVAILABLE, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 15, 30, 31
INVALID_REQUEST, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 42, 53
NO_NODE = (-1, "", -1)


@pytest.fixture
def wire(broker):
    w = Wire(broker.bootstrap)
    yield w
    w.close()


def _answers(response) -> list[tuple]:
    return [(c.key, int(c.error_code), (int(c.node_id), c.host, int(c.port))) for c in response.coordinators]


def test_api_versions_advertises_find_coordinator_0_to_6(wire):
    r = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}[10] == (0, 6)


@pytest.mark.parametrize("key_type", [GROUP, TRANSACTION])
def test_v6_answers_groups_and_transactional_ids_as_v4_and_v5(broker, wire, key_type):
    keys = tuple(f"k{key_type}-{i}-{uuid.uuid4().hex[:6]}" for i in range(5))
    v6 = _answers(wire.call(FindV6(key_type=key_type, coordinator_keys=keys)))
    host, port = broker.bootstrap.rsplit(":", 1)
    assert v6 == [(k, 0, (broker.server.node_id, host, int(port))) for k in keys]
    for older in (FindV4, FindV5):
        assert _answers(wire.call(older(key_type=key_type, coordinator_keys=keys))) == v6


def test_v6_keeps_the_bad_key_errors_of_v5(wire):
    """An empty group id, an empty transactional id, an unknown key type: v6 answers what v5 does."""
    for key_type, keys in ((GROUP, ("", "ok")), (TRANSACTION, ("", "ok")), (3, ("a", "b"))):
        v5 = _answers(wire.call(FindV5(key_type=key_type, coordinator_keys=keys)))
        assert _answers(wire.call(FindV6(key_type=key_type, coordinator_keys=keys))) == v5
        assert v5[0][1] != 0
    assert [c[1] for c in _answers(wire.call(FindV6(key_type=3, coordinator_keys=("a", "b"))))] \
        == [INVALID_REQUEST] * 2


def test_share_keys_get_kafka_39s_errors_per_version(wire):
    keys = ("sg:topic-id:0", "sg:topic-id:1")
    assert _answers(wire.call(FindV6(key_type=SHARE, coordinator_keys=keys))) \
        == [(k, COORDINATOR_NOT_AVAILABLE, NO_NODE) for k in keys]
    for older in (FindV4, FindV5):  # the key type is v6's
        assert _answers(wire.call(older(key_type=SHARE, coordinator_keys=keys))) \
            == [(k, INVALID_REQUEST, NO_NODE) for k in keys]
    r = wire.call(FindV3(key_type=SHARE, key=keys[0]))
    assert (int(r.error_code), int(r.node_id), r.host, int(r.port)) == (INVALID_REQUEST, *NO_NODE)


def _compact_string(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b) + 1]) + b  # uvarint length + 1 (short strings: one byte)


def test_a_hand_encoded_v6_request(broker, wire):
    """Bytes as a Kafka 3.9 client sends them (request header v2, flexible body), not kio's
    encoder: the answer is a v6 response (response header v1) naming this broker."""
    group = "raw-" + uuid.uuid4().hex[:8]
    header = struct.pack(">hhih", 10, 6, 77, 3) + b"raw" + b"\x00"  # key, version, cid, client id, no tags
    body = struct.pack(">b", GROUP) + bytes([2]) + _compact_string(group) + b"\x00"
    wire.send_raw(codec.frame(header + body))
    cid, r = codec.decode_response(wire.recv_frame(), 10, 6)
    assert cid == 77
    assert [(c.key, int(c.error_code), int(c.node_id)) for c in r.coordinators] \
        == [(group, 0, broker.server.node_id)]


def test_v6_names_only_brokers_of_the_listeners_security(tmp_path):
    """Per-listener placement at v6 is v4's: through a plaintext broker, only plaintext brokers."""
    with brokers(f"file://{tmp_path}/r", plain(), plain(), sasl()) as (a, a2, _b):
        keys = tuple(f"group-{i}" for i in range(40))
        w = Wire(a2.bootstrap)
        for key_type in (GROUP, TRANSACTION):
            v6 = _answers(w.call(FindV6(key_type=key_type, coordinator_keys=keys)))
            assert v6 == _answers(w.call(FindV4(key_type=key_type, coordinator_keys=keys)))
            assert {node[0] for _, err, node in v6 if err == 0} == {a.server.node_id, a2.server.node_id}
        w.close()


def test_v6_checks_describe_on_groups_and_transactional_ids_and_cluster_action_for_share(acl_broker, root):
    group, tid = unique("fc6-group-"), unique("fc6-txn-")
    w = sasl_wire(acl_broker, "alice")
    try:
        def errors(key_type, key):
            return [c[1] for c in _answers(w.call(FindV6(key_type=key_type, coordinator_keys=(key,))))]

        assert errors(GROUP, group) == [GROUP_AUTHORIZATION_FAILED]
        assert errors(TRANSACTION, tid) == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
        assert errors(SHARE, "sg:x:0") == [CLUSTER_AUTHORIZATION_FAILED]
        allow(root, R.GROUP, group, Operation.DESCRIBE)
        allow(root, R.TRANSACTIONAL_ID, tid, Operation.DESCRIBE)
        allow(root, R.CLUSTER, "kafka-cluster", Operation.CLUSTER_ACTION)
        deadline = time.monotonic() + 10
        while errors(SHARE, "sg:x:0") != [COORDINATOR_NOT_AVAILABLE] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert errors(GROUP, group) == [0]
        assert errors(TRANSACTION, tid) == [0]
        assert errors(SHARE, "sg:x:0") == [COORDINATOR_NOT_AVAILABLE]
    finally:
        w.close()


def _requests_served(broker, api: str) -> dict[str, float]:
    """``{version: count}`` of requests of ``api`` the broker answered (its Prometheus metrics)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    return {s.labels["version"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "kafkastore_requests_total" and s.labels.get("api") == api}


def test_kafka_python_negotiates_v6_for_transactions_and_groups(tmp_path):
    """kafka-python 3.0 sends the highest FindCoordinator version both sides serve: v6, for its
    transactional producer's coordinator (key type 1) and its consumer group's (key type 0).
    (librdkafka 2.16 sends v2 and aiokafka 0.14 v1: both covered by the v0-5 tests.)"""
    from kafka import KafkaConsumer, KafkaProducer

    root = f"file://{tmp_path}/r"
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500, metrics_listen=("127.0.0.1", 0))
    with BrokerThread(Storage(root), opts) as b:
        topic = "fc6-" + uuid.uuid4().hex[:6]
        create_topic(Storage(root), topic, 1)
        p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="tx-" + topic)
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"hello")
        p.commit_transaction()
        p.close()
        c = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id="g-" + topic,
                          auto_offset_reset="earliest", isolation_level="read_committed")
        got, deadline = [], time.monotonic() + 30
        try:
            while not got and time.monotonic() < deadline:
                got += [r.value for records in c.poll(timeout_ms=500).values() for r in records]
            c.commit()
        finally:
            c.close()
        assert got == [b"hello"]
        assert set(_requests_served(b, "FindCoordinator")) == {"6"}
