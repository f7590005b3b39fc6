"""SCRAM users: managed with the admin clients' own calls, stored under the
root, accepted by every broker of the root, with Kafka's error codes."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)
from kio.schema.alter_user_scram_credentials.v0.request import (AlterUserScramCredentialsRequest,
                                                                ScramCredentialDeletion,
                                                                ScramCredentialUpsertion)
from kio.schema.describe_user_scram_credentials.v0.request import (DescribeUserScramCredentialsRequest,
                                                                   UserName)
from kio.static.primitive import i8, i32

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.cluster.scram import ScramUsers
from kafkastore.storage import Storage

from .wire import Wire

UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 33, 91, 92, 93
ADMIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "admin", "sasl.password": "adminpw"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """Broker A also knows the file user ``filer``; broker B has only the root's users
    (``--sasl``), among them ``admin`` (made with ``ScramUsers``, as ``kafkastore users add``)."""
    root = "file://" + str(tmp_path_factory.mktemp("scram-root"))
    ScramUsers(Storage(root)).add("admin", "SCRAM-SHA-256", "adminpw")
    a_opts = ServeOptions(port=0, heartbeat_ms=200, credentials={"filer": "filepw"})
    b_opts = ServeOptions(port=0, heartbeat_ms=200, sasl=True)
    with BrokerThread(Storage(root), a_opts) as a, BrokerThread(Storage(root), b_opts) as b:
        yield root, a, b


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **ADMIN})


def _produce(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> str | None:
    """Produce one record authenticated as ``user``; None on success, else the error."""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                  "message.timeout.ms": 4000, "error_cb": lambda e: errors.append(e)})
    delivered: list = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.monotonic() + 6
    while not delivered and not errors and time.monotonic() < deadline:
        p.poll(0.05)  # an authentication failure comes as an error at once: no need to wait more
    if delivered and delivered[0] is None:
        return None
    return str(errors[0] if errors else delivered[0] if delivered else "no delivery report")


def _scram_ok(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a SCRAM exchange with this one broker succeeds (on the wire: a client library
    would go on to whichever broker leads its partition)."""
    import base64
    import hashlib
    import hmac

    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    algo = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    w = Wire(bootstrap, timeout=5)
    try:
        w.call(SaslHandshakeRequest(mechanism=mechanism))
        first = f"n={user},r=testnonce"
        r = w.call(SaslAuthenticateRequest(auth_bytes=("n,," + first).encode()))
        server_first = bytes(r.auth_bytes).decode()
        f = dict(kv.split("=", 1) for kv in server_first.split(","))
        salted = hashlib.pbkdf2_hmac(algo, password.encode(), base64.b64decode(f["s"]), int(f["i"]))
        client_key = hmac.new(salted, b"Client Key", algo).digest()
        final = f"c=biws,r={f['r']}"
        auth = f"{first},{server_first},{final}".encode()
        sig = hmac.new(hashlib.new(algo, client_key).digest(), auth, algo).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
        r = w.call(SaslAuthenticateRequest(auth_bytes=f"{final},p={proof}".encode()))
        return int(r.error_code) == 0
    finally:
        w.close()


def test_user_made_with_the_admin_client_logs_in_on_every_broker_until_removed(brokers):
    root, a, b = brokers
    admin = _admin(a.bootstrap)
    admin.create_topics([NewTopic("scram-t", 1, 1)])["scram-t"].result(10)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"s3cret")])
    futs["carol"].result(10)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_512, 8192)]
    # Stored salted and hashed: the password is nowhere under the root.
    doc = ScramUsers(Storage(root)).document.refresh()
    assert set(doc["users"]["carol"]["SCRAM-SHA-512"]) == {"salt", "iterations", "stored_key", "server_key"}
    assert "s3cret" not in repr(doc)

    # (On the wire with broker A alone: a real client's produce may be sent on to B.)
    deadline = time.monotonic() + 10
    while not _scram_ok(a.bootstrap, "SCRAM-SHA-512", "carol", "s3cret"):
        assert time.monotonic() < deadline, "broker A never accepted the new user"
        time.sleep(0.2)
    assert not _scram_ok(a.bootstrap, "SCRAM-SHA-512", "carol", "wrong")
    # The other broker of the root (no credentials file) accepts her within seconds.
    deadline = time.monotonic() + 10
    while not _scram_ok(b.bootstrap, "SCRAM-SHA-512", "carol", "s3cret"):
        assert time.monotonic() < deadline, "broker B never accepted the new user"
        time.sleep(0.2)
    # Both know her: a real client produces, whichever broker it is sent on to.
    assert _produce(b.bootstrap, "SCRAM-SHA-512", "carol", "s3cret", "scram-t") is None

    futs = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)])
    futs["carol"].result(10)
    with pytest.raises(KafkaException):  # gone: describing her is RESOURCE_NOT_FOUND
        admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    deadline = time.monotonic() + 10
    while _scram_ok(a.bootstrap, "SCRAM-SHA-512", "carol", "s3cret") or \
            _scram_ok(b.bootstrap, "SCRAM-SHA-512", "carol", "s3cret"):
        assert time.monotonic() < deadline, "removal did not stop new logins"
        time.sleep(0.2)
    assert _produce(b.bootstrap, "SCRAM-SHA-512", "carol", "s3cret", "scram-t") is not None


def test_kafka_python_admin_manages_users_and_scram_sha_256_logs_in(brokers):
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient

    root, a, b = brokers
    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="admin",
                             sasl_plain_password="adminpw")
    try:
        from kafka.admin import ScramMechanism as KpMechanism, UserScramCredentialUpsertion as KpUp
    except ImportError:
        pytest.skip("this kafka-python has no SCRAM user admin")
    try:
        admin.alter_user_scram_credentials([KpUp("dave", KpMechanism.SCRAM_SHA_256, "pw-d", iterations=4096)])
        described = admin.describe_user_scram_credentials(["dave"])
        assert "dave" in repr(described)
    finally:
        admin.close()
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="dave",
                      sasl_plain_password="pw-d", request_timeout_ms=5000)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                assert isinstance(c.topics(), set)
                break
            except Exception:  # noqa: BLE001 - not seen by broker B yet
                assert time.monotonic() < deadline
                time.sleep(0.5)
    finally:
        c.close()


def _authenticated_wire(bootstrap: str, user: bytes = b"filer", password: bytes = b"filepw") -> Wire:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    w = Wire(bootstrap, timeout=5)
    assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
    assert int(w.call(SaslAuthenticateRequest(auth_bytes=b"\x00" + user + b"\x00" + password)).error_code) == 0
    return w


def _up(name, mechanism=1, iterations=4096, salt=b"salt", salted=b"x" * 32):
    return ScramCredentialUpsertion(name=name, mechanism=i8(mechanism), iterations=i32(iterations),
                                    salt=salt, salted_password=salted)


def test_bad_changes_get_kafkas_error_codes(brokers):
    _, a, _ = brokers
    w = _authenticated_wire(a.bootstrap)
    try:
        r = w.call(AlterUserScramCredentialsRequest(deletions=(
            ScramCredentialDeletion(name="nobody", mechanism=i8(1)),), upsertions=(
            _up("few", iterations=4095), _up("many", iterations=16385), _up("mech", mechanism=0),
            _up("twice"), _up("twice", salt=b"other"), _up(""), _up("nosalt", salt=b""), _up("ok"))))
        got = {x.user: int(x.error_code) for x in r.results}
        assert got == {"nobody": RESOURCE_NOT_FOUND, "few": UNACCEPTABLE_CREDENTIAL,
                       "many": UNACCEPTABLE_CREDENTIAL, "mech": UNSUPPORTED_SASL_MECHANISM,
                       "twice": DUPLICATE_RESOURCE, "": UNACCEPTABLE_CREDENTIAL,
                       "nosalt": UNACCEPTABLE_CREDENTIAL, "ok": 0}
        d = w.call(DescribeUserScramCredentialsRequest(users=(UserName(name="ok"), UserName(name="few"),
                                                              UserName(name="ok2"), UserName(name="ok2"))))
        got = {x.user: (int(x.error_code), [(int(c.mechanism), int(c.iterations)) for c in x.credential_infos])
               for x in d.results}
        assert got == {"ok": (0, [(1, 4096)]), "few": (RESOURCE_NOT_FOUND, []), "ok2": (DUPLICATE_RESOURCE, [])}
        everyone = w.call(DescribeUserScramCredentialsRequest(users=None))
        assert "ok" in {x.user for x in everyone.results} and "few" not in {x.user for x in everyone.results}
    finally:
        w.close()


def test_the_roots_credential_wins_over_the_files_for_its_mechanism(brokers):
    root, a, _ = brokers
    admin = _admin(a.bootstrap)
    # On the wire with broker A alone (B has no credentials file): a real client may be sent on to B.
    assert _scram_ok(a.bootstrap, "SCRAM-SHA-256", "filer", "filepw")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("filer", info, b"rootpw")])
    futs["filer"].result(10)
    deadline = time.monotonic() + 10  # the admin request may have gone to B: A sees it within 2 s
    while not _scram_ok(a.bootstrap, "SCRAM-SHA-256", "filer", "rootpw"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert not _scram_ok(a.bootstrap, "SCRAM-SHA-256", "filer", "filepw")
    # Mechanisms the root has no credential for still take the file's password.
    assert _scram_ok(a.bootstrap, "SCRAM-SHA-512", "filer", "filepw")


def test_with_the_authorizer_only_cluster_alter_may_change_users(tmp_path):
    """Kafka checks ALTER (change) and DESCRIBE (list) on the cluster: an ordinary user may not
    give herself someone else's password."""
    root = "file://" + str(tmp_path)
    opts = ServeOptions(port=0, credentials={"admin": "adminpw", "eve": "evepw"}, authorizer=True,
                        super_users=("User:admin",))
    with BrokerThread(Storage(root), opts) as b:
        def client(user, password):
            return AdminClient({"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})

        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        eve = client("eve", "evepw")
        fut = eve.alter_user_scram_credentials([UserScramCredentialUpsertion("admin", info, b"mine")])["admin"]
        with pytest.raises(KafkaException) as err:
            fut.result(10)
        assert err.value.args[0].code() == 31  # CLUSTER_AUTHORIZATION_FAILED
        # (Over the wire: librdkafka 2.16 crashes on DescribeUserScramCredentials' top-level
        # error, which Kafka sends in this case too.)
        w = _authenticated_wire(b.bootstrap, b"eve", b"evepw")
        try:
            r = w.call(DescribeUserScramCredentialsRequest(users=None))
            assert int(r.error_code) == 31 and r.results == ()
        finally:
            w.close()
        assert ScramUsers(Storage(root)).describe(fresh=True) == {}
        admin = client("admin", "adminpw")
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("zed", info, b"z")])["zed"].result(10)
        assert ScramUsers(Storage(root)).describe(fresh=True) == {"zed": {"SCRAM-SHA-256": 4096}}


def test_serve_sasl_accepts_a_user_made_with_the_cli(tmp_path):
    """`kafkastore users add` then `kafkastore serve --sasl` (no credentials file): she logs in,
    a client without SASL does not get served."""
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient as Admin

    from tests.helpers.serve_procs import start_serve, stop_serve

    root = "file://" + str(tmp_path)
    subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, "users", "add", "erin",
                    "--mechanism", "SCRAM-SHA-512", "--password-stdin"], input="pw-e\n", text=True, check=True)
    proc = start_serve(root, extra=["--sasl"])
    try:
        good = Admin({"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "erin", "sasl.password": "pw-e"})
        good.create_topics([NewTopic("cli-t", 1, 1)])["cli-t"].result(10)
        assert _produce(proc.bootstrap, "SCRAM-SHA-512", "erin", "pw-e", "cli-t") is None
        assert _produce(proc.bootstrap, "SCRAM-SHA-512", "erin", "nope", "cli-t") is not None
    finally:
        stop_serve(proc)
