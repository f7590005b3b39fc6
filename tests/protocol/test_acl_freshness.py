"""ACL decisions never use data older than ``acl_max_age_s``, whatever the traffic: after an
idle spell the first request waits for a fresh read instead of being decided on the ACLs
in hand."""
from __future__ import annotations

import time

from kio.schema.list_offsets.v8 import request as lo

from kafkastore.cluster.acls import (AclFilter, Operation, ResourceType as R, acl_document,
                                     remove_acls)
from kafkastore.protocol.server import BrokerThread
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.acl_broker import (  # noqa: F401 - fixtures
    TOPIC_AUTHORIZATION_FAILED, acl_options, allow, root, sasl_wire, unique)

MAX_AGE_S = 1.0


def _list_offsets(w, topic: str) -> int:
    return int(w.call(lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        lo.ListOffsetsTopic(name=topic, partitions=(
            lo.ListOffsetsPartition(partition_index=0, timestamp=-1),)),))).topics[0].partitions[0].error_code)


def test_a_revoke_applies_within_the_bound_after_an_idle_spell(root):
    topic = unique("idle-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.DESCRIBE)
    with BrokerThread(Storage(root), acl_options(acl_max_age_s=MAX_AGE_S)) as broker:
        w = sasl_wire(broker, "alice")
        deadline = time.monotonic() + 10
        while _list_offsets(w, topic) != 0:    # the grant reached the broker
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(3 * MAX_AGE_S)               # idle: nothing asks the authorizer
        remove_acls(acl_document(Storage(root)), [AclFilter(R.TOPIC, topic)])
        time.sleep(MAX_AGE_S + 0.3)             # the revoke is older than the bound now
        assert _list_offsets(w, topic) == TOPIC_AUTHORIZATION_FAILED
