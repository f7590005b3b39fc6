"""ACL and quota decisions stay within their freshness bound on a slow store without making
every request wait, and fail closed when the documents cannot be read.

The broker's root is a local directory behind bench/counting_fs.py, which makes every
request under ``_cluster/`` (the shared documents) take a fixed time, as an object store's
latency would, or fail. Nothing here measures time: the tests count answers."""
from __future__ import annotations

from kafkastore.cluster.acls import (AclFilter, Operation, ResourceType as R, acl_document,
                                     remove_acls)
from kafkastore.errors import StorageError
from kafkastore.protocol.authorizer import Authorizer
from kafkastore.protocol.server import BrokerThread
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.acl_broker import TOPIC_AUTHORIZATION_FAILED, acl_options, allow, sasl_wire, unique
from tests.helpers.wire_requests import batch, produce
from tests.helpers.counting import counting_fs
from tests.helpers.idle_spell import JumpClock, idle

KAFKA_STORAGE_ERROR = 56


def _failing(fs, under: str = "/_cluster/"):
    """Make ``fs`` fail every request under ``under`` while ``fs.failing`` is true."""
    count = fs._count
    fs.failing = False

    def maybe_fail(op, nbytes=0, path=""):
        if fs.failing and under in str(path):
            raise OSError(5, "the store is down")
        return count(op, nbytes, path)

    fs._count = maybe_fail
    return fs


def _produce(w, topic: str) -> int:
    return produce(w, topic, 0, batch([b"v"]))[0]


def test_requests_are_answered_while_each_document_request_takes_two_seconds(tmp_path):
    """At 2 s a store request, a read of a document that is three requests one after the
    other (hint, next version, existence check: 6 s) is longer than the 5 s a request may
    wait for a fresh copy: on the old code requests failed with KAFKA_STORAGE_ERROR. A read
    is one request now (2 s), started by a refresher before the copy in hand expires."""
    root = f"file://{tmp_path}"
    topic = unique("slow-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.WRITE)
    fs = counting_fs(Storage(root).fs, delay_s=2.0, delay_under="/_cluster/")
    with BrokerThread(Storage(root, fs=fs), acl_options()) as broker:
        w = sasl_wire(broker, "alice")
        answers = [_produce(w, topic) for _ in range(8)]
    assert answers == [0] * 8


def test_a_revoke_is_never_missed_while_the_documents_cannot_be_read(tmp_path):
    """Reads failing after an idle spell: the request is refused or fails, never decided on
    the ACLs in hand; once the store answers again the revoke applies."""
    root = f"file://{tmp_path}"
    topic = unique("down-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.WRITE)
    clock = JumpClock()
    fs = _failing(counting_fs(Storage(root).fs))
    with BrokerThread(Storage(root, fs=fs, clock=clock), acl_options(acl_max_age_s=600.0)) as broker:
        w = sasl_wire(broker, "alice")
        assert _produce(w, topic) == 0
        remove_acls(acl_document(Storage(root)), [AclFilter(R.TOPIC, topic)])
        # Idle past the bound. The jump lapses the broker's lease too: it fences itself and
        # closes the connections opened before, so the client reconnects (and logs in).
        idle(clock, broker, 601)
        w = sasl_wire(broker, "alice")
        fs.failing = True                         # no read of the ACLs can succeed now
        for _ in range(3):
            assert _produce(w, topic) in (KAFKA_STORAGE_ERROR, TOPIC_AUTHORIZATION_FAILED)
        fs.failing = False
        assert _produce(w, topic) == TOPIC_AUTHORIZATION_FAILED


def test_a_failed_background_load_leaves_the_acls_stale(tmp_path):
    """The authorizer's own background load (asked for when a decision finds the index old)
    used to mark the ACLs in hand as just read when the read failed, so requests were then
    decided on them without waiting: fail open for as long as the store failed."""
    now = [0.0]
    submitted = []
    root = f"file://{tmp_path}"
    fs = _failing(counting_fs(Storage(root).fs))
    authz = Authorizer(acl_document(Storage(root, fs=fs)), submit=submitted.append,
                       max_age_s=2.0, clock=lambda: now[0])
    authz.load()
    fs.failing = True
    now[0] = 3.0
    assert authz.stale()
    authz.authorize("User:alice", "1.2.3.4", Operation.READ, R.TOPIC, "t")   # asks for a load
    assert len(submitted) == 1
    submitted[0]()                                                         # the load fails
    assert authz.stale()
    try:
        authz.load_if_stale()
    except StorageError:
        pass
    assert authz.stale()


def test_a_removed_scram_user_cannot_log_in_after_an_idle_spell(tmp_path):
    """SCRAM credentials obey the same bound: a user removed on another broker (here, the
    CLI's ScramUsers) cannot log in, idle spell or not; the credentials in hand are re-read
    in the background or, past the bound, at the login."""
    from confluent_kafka import KafkaException, Producer

    from kafkastore.cluster.scram import ScramUsers
    from kafkastore.protocol.server import ServeOptions

    root = f"file://{tmp_path}"
    ScramUsers(Storage(root)).add("erin", "SCRAM-SHA-256", "pw-e")
    clock = JumpClock()

    def login(bootstrap: str) -> bool:
        p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "erin",
                      "sasl.password": "pw-e"})
        try:
            p.list_topics(timeout=15)
            return True
        except KafkaException:
            return False

    with BrokerThread(Storage(root, clock=clock), ServeOptions(port=0, sasl=True)) as broker:
        assert login(broker.bootstrap)
        ScramUsers(Storage(root)).remove("erin")
        idle(clock, broker, 601)                  # the jump lapses the lease too (see above)
        assert not login(broker.bootstrap)
