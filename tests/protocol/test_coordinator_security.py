"""A group coordinator a client can reach (the group side): with brokers of
different listener security on one root, FindCoordinator through a plaintext broker must name
a plaintext broker, as Metadata lists only those; naming the SASL one leaves the consumer
unable to reach its coordinator (it is not in the Metadata it was given)."""
from __future__ import annotations

from kio.schema.find_coordinator.v4 import request as fc_req

from tests.helpers.mixed_security import brokers, plain, sasl

from .wire import Wire


def test_find_coordinator_names_only_brokers_of_the_same_security(tmp_path):
    with brokers(f"file://{tmp_path}/r", plain(), sasl()) as (a, _):
        groups = tuple(f"group-{i}" for i in range(40))
        w = Wire(a.bootstrap)
        r = w.call(fc_req.FindCoordinatorRequest(key_type=0, coordinator_keys=groups))
        w.close()
        named = {c.node_id for c in r.coordinators if int(c.error_code) == 0}
        assert named == {a.server.node_id}, f"plaintext clients told to use node(s) {named - {a.server.node_id}}"


def test_coordinators_are_chosen_and_owned_within_each_security_protocol(tmp_path):
    """Two plaintext brokers and one SASL broker on one root: plaintext clients are sent to
    both plaintext brokers (groups and transactional ids spread over them), never to the SASL
    one; the broker named agrees it owns the key (no NOT_COORDINATOR loop), and for SASL
    clients the SASL broker owns every key."""
    from kafkastore.protocol.coordinators.group_service import coordinates

    with brokers(f"file://{tmp_path}/r", plain(), plain(), sasl()) as (a, a2, b):
        keys = tuple(f"group-{i}" for i in range(40))  # crc32 rendezvous: both nodes get some
        plain_nodes = {a.server.node_id: a, a2.server.node_id: a2}
        w = Wire(a2.bootstrap)
        for key_type in (0, 1):  # groups, transactional ids
            r = w.call(fc_req.FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys))
            named = {c.key: c.node_id for c in r.coordinators if int(c.error_code) == 0}
            assert set(named) == set(keys)
            assert set(named.values()) == set(plain_nodes), named
            for key, node in named.items():
                assert coordinates(plain_nodes[node].server, key)
                assert not coordinates(plain_nodes[({*plain_nodes} - {node}).pop()].server, key)
                assert coordinates(b.server, key)  # the SASL clients' coordinator
        w.close()
