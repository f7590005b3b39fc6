"""The registry listener's security is the Kafka listener's (loopback by default; TLS and basic
auth with the SASL credentials otherwise), and ``serve --schema-registry-listen`` starts it."""
from __future__ import annotations

import json
import ssl

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError

from kafkastore.cli.entry import main as cli
from kafkastore.errors import ConfigError
from kafkastore.schema_registry import SchemaRegistryThread
from kafkastore.storage import Storage

from tests.helpers.serve_procs import start_serve, stop_serve
from tests.helpers.tls import self_signed


def test_non_loopback_needs_tls_and_credentials(tmp_path, capsys):
    storage = Storage(f"file://{tmp_path}/r")
    with pytest.raises(ConfigError, match="schema registry: .*TLS.*SASL"):
        SchemaRegistryThread(storage, host="0.0.0.0", port=0)
    SchemaRegistryThread(storage, host="0.0.0.0", port=0, insecure=True)   # allowed, not started
    assert cli(["--root", f"file://{tmp_path}/r", "serve", "--listen", "127.0.0.1:0",
                "--schema-registry-listen", "0.0.0.0:0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error: schema registry:") and err.count("\n") == 1


def test_tls_and_basic_auth_with_a_real_client(tmp_path):
    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    with SchemaRegistryThread(Storage(f"file://{tmp_path}/r"), port=0, ssl_context=ctx,
                              credentials={"alice": "s3cret"}) as sr:
        assert sr.url.startswith("https://")
        good = SchemaRegistryClient({"url": sr.url, "ssl.ca.location": cert,
                                     "basic.auth.user.info": "alice:s3cret"})
        sid = good.register_schema("s-value", Schema('"string"', "AVRO"))
        assert good.get_schema(sid).schema_str == '"string"'
        for info in ("alice:wrong", "bob:s3cret"):
            bad = SchemaRegistryClient({"url": sr.url, "ssl.ca.location": cert, "basic.auth.user.info": info})
            with pytest.raises(ClientError) as e:
                bad.get_subjects()
            assert e.value.http_status_code == 401
        anonymous = SchemaRegistryClient({"url": sr.url, "ssl.ca.location": cert})
        with pytest.raises(ClientError) as e:
            anonymous.get_subjects()
        assert e.value.http_status_code == 401


def test_the_roots_scram_users_log_in_with_basic_auth(tmp_path):
    """serve --sasl: the root's SCRAM users (kafkastore users add) are the registry's users too;
    the password is checked against the stored keys."""
    from kafkastore.cluster.scram import ScramUsers

    storage = Storage(f"file://{tmp_path}/r")
    ScramUsers(storage).add("carol", "SCRAM-SHA-512", "pa:ss")
    with SchemaRegistryThread(storage, port=0, root_users=True, credentials={"dave": "x"}) as sr:
        for info, ok in (("carol:pa:ss", True), ("dave:x", True), ("carol:pa", False),
                         ("erin:pa:ss", False)):
            client = SchemaRegistryClient({"url": sr.url, "basic.auth.user.info": info})
            if ok:
                assert client.get_subjects() == []
            else:
                with pytest.raises(ClientError) as e:
                    client.get_subjects()
                assert e.value.http_status_code == 401


def test_serve_flag_starts_the_registry(tmp_path):
    proc = start_serve(f"file://{tmp_path}/r", extra=["--schema-registry-listen", "127.0.0.1:0"])
    try:
        line = proc.stdout.readline()
        assert line.startswith("kafkastore: schema registry on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        client = SchemaRegistryClient({"url": url})
        sid = client.register_schema("cli-value", Schema(json.dumps({"type": "string"}), "AVRO"))
        assert client.get_subjects() == ["cli-value"] and sid == 1
    finally:
        stop_serve(proc)
