"""Listener security: loopback by default, TLS + SASL (PLAIN, SCRAM-SHA-256) otherwise."""
from __future__ import annotations

import ssl

import pytest

from kafkastore.cli.entry import main as cli
from kafkastore.errors import ConfigError
from kafkastore.protocol.apis.sasl import load_credentials
from kafkastore.protocol.server import BrokerThread, ServeOptions, check_listener_security
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.kafka_clients import confluent_consume
from tests.helpers.tls import self_signed


def test_non_loopback_needs_tls_and_sasl_or_insecure(capsys, tmp_path):
    with pytest.raises(ConfigError, match="TLS .* and SASL"):
        check_listener_security(ServeOptions(host="0.0.0.0"))
    check_listener_security(ServeOptions(host="0.0.0.0", insecure=True))
    check_listener_security(ServeOptions(host="127.0.0.1"))
    assert cli(["--root", f"file://{tmp_path}/r", "serve", "--listen", "0.0.0.0:0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error:") and "--insecure" in err and err.count("\n") == 1


def test_credentials_file_errors(tmp_path):
    bad = tmp_path / "creds"
    bad.write_text("nocolon\n")
    with pytest.raises(ConfigError, match="user:password"):
        load_credentials(str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        load_credentials(str(tmp_path / "missing"))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_tls_and_sasl_with_a_real_client(tmp_path, mechanism):
    from confluent_kafka import Producer

    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "secure", 1)
    opts = ServeOptions(port=0, ssl_context=ctx, credentials={"alice": "s3cret"}, commit_interval_ms=1)
    with BrokerThread(Storage(root), opts) as b:
        conf = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "s3cret",
                "ssl.ca.location": cert}
        p = Producer(conf)
        for i in range(10):
            p.produce("secure", value=b"s-%d" % i)
        assert p.flush(20) == 0
        got = confluent_consume(b.bootstrap, "secure", 1, 10, **{k: v for k, v in conf.items()
                                                                  if k != "bootstrap.servers"})
        assert sorted(v for *_, v in got) == sorted(b"s-%d" % i for i in range(10))
        # A wrong password is refused: nothing gets through.
        errors = []
        bad = Producer({**conf, "sasl.password": "wrong", "message.timeout.ms": 3000,
                        "error_cb": lambda e: errors.append(e)})
        bad.produce("secure", value=b"intruder", on_delivery=lambda e, m: errors.append(e))
        bad.flush(10)
        assert errors
        from kafkastore.manifest import ManifestStore
        assert ManifestStore(Storage(root), "secure", 0).latest().high_watermark == 10


def test_unauthenticated_requests_are_refused(tmp_path):
    from kio.schema.metadata.v12 import request as md_req

    from .wire import Wire

    opts = ServeOptions(port=0, credentials={"alice": "pw"})
    with BrokerThread(Storage(f"file://{tmp_path}/r"), opts) as b:
        w = Wire(b.bootstrap, timeout=5)
        w.send(md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
        assert w.closed()


def test_address_in_use_is_a_one_line_error(tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        assert cli(["--root", f"file://{tmp_path}/r", "serve", "--listen", f"127.0.0.1:{port}"]) == 1
    finally:
        s.close()
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error: cannot listen on 127.0.0.1:") and err.count("\n") == 1
