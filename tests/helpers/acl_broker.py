"""An authorizing, SASL-PLAIN broker for ACL tests, with the helpers those tests share
(tests/protocol/test_acls.py, test_txn_acls.py, test_find_coordinator.py)."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkastore.cluster.acls import AclBinding as Binding, Operation, PatternType, Permission
from kafkastore.cluster.acls import ResourceType as R, acl_document, add_acls
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from tests.protocol.wire import Wire

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED = 31, 42, 54
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


def acl_options(**kw):
    return ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500, credentials=USERS,
                        authorizer=True, super_users=("User:admin",), **kw)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("acl-root"))


@pytest.fixture(scope="module")
def broker(root):
    with BrokerThread(Storage(root), acl_options(acl_max_age_s=0.5)) as b:  # changes seen sooner
        yield b


def conf(broker, user: str, **extra) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user], **extra}


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def allow(root: str, rtype: R, name: str, op: Operation, who: str = "User:alice",
          pattern: PatternType = PatternType.LITERAL, perm: Permission = Permission.ALLOW) -> None:
    """Add a binding straight to the root (as ``kafkastore acls add`` does); the broker sees it
    within its acl_max_age_s."""
    add_acls(acl_document(Storage(root)), [Binding(rtype, name, pattern, who, "*", op, perm)])


def wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def produce(broker, user: str, topic: str, value: bytes = b"v", **extra):
    """The delivery error of one message (None: written)."""
    p = Producer(conf(broker, user, **{"message.timeout.ms": 5000, "retries": 0, **extra}))
    errors = []
    p.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    return errors[0] if errors else "no delivery report"


def sasl_wire(broker, user: str) -> Wire:
    """A raw connection authenticated as ``user`` with SASL PLAIN."""
    w = Wire(broker.bootstrap, timeout=10)
    assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
    r = w.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()))
    assert int(r.error_code) == 0
    return w
