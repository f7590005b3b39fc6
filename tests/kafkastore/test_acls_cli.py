"""``kafkastore acls add|list|remove`` and ``serve --authorizer --super-users`` at the command line:
the ACLs land in the root's document a broker reads, names are validated, errors are one line."""
from __future__ import annotations

import json

import pytest

from kafkastore.cluster.acls import AclBinding, Operation, PatternType, Permission, ResourceType, acl_document, list_acls
from kafkastore.cli.entry import main
from kafkastore.storage import Storage
from tests.helpers.cli import cli_runner, one_error_line

pytestmark = pytest.mark.usefixtures("clean_config_env")


@pytest.fixture
def cli(capsys, monkeypatch, local_root):
    return cli_runner(main, capsys, monkeypatch, local_root)


def test_add_list_remove(cli):
    assert cli("acls", "add", "--principal", "User:alice", "--operation", "Read", "--operation",
               "Write", "--topic", "orders")[0] == 0
    rc, _, err = cli("acls", "add", "--principal", "User:*", "--operation", "DescribeConfigs",
                     "--topic", "orders.", "--prefixed", "--deny", "--host", "10.0.0.1")
    assert rc == 0 and "DENY User:* from 10.0.0.1 DESCRIBE_CONFIGS TOPIC PREFIXED 'orders.'" in err
    assert cli("acls", "add", "--principal", "User:ops", "--operation", "Alter", "--cluster")[0] == 0
    assert cli("acls", "add", "--principal", "User:app", "--operation", "Write",
               "--transactional-id", "app-1")[0] == 0
    assert cli("acls", "add", "--principal", "User:app", "--operation", "Read", "--group", "g")[0] == 0
    stored = list_acls(acl_document(Storage(cli.root)))
    assert AclBinding(ResourceType.TOPIC, "orders.", PatternType.PREFIXED, "User:*", "10.0.0.1",
                      Operation.DESCRIBE_CONFIGS, Permission.DENY) in stored
    assert AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ops", "*",
                      Operation.ALTER, Permission.ALLOW) in stored
    assert len(stored) == 6

    rc, out, _ = cli("acls", "list", "--topic", "orders.eu", "--pattern-type", "match")
    assert rc == 0 and [a["name"] for a in json.loads(out)] == ["orders."]
    rc, out, _ = cli("acls", "list", "--principal", "User:app")
    assert sorted(a["resource_type"] for a in json.loads(out)) == ["group", "transactional_id"]

    rc, _, err = cli("acls", "remove", "--topic", "orders", "--operation", "Write")
    assert rc == 0 and "removed: ALLOW User:alice from * WRITE TOPIC LITERAL 'orders'" in err
    rc, _, err = cli("acls", "remove", "--topic", "orders")  # the prefixed one is another pattern
    assert rc == 0 and "READ" in err and "PREFIXED" not in err
    rc, _, err = cli("acls", "remove", "--topic", "nothing")
    assert rc == 0 and "nothing removed" in err
    assert len(list_acls(acl_document(Storage(cli.root)))) == 4


@pytest.mark.parametrize("argv, message", [
    (["add", "--principal", "alice", "--operation", "Read", "--topic", "t"], "invalid principal"),
    (["add", "--principal", "User:a", "--operation", "Frob", "--topic", "t"], "unknown operation"),
    (["add", "--principal", "User:a", "--operation", "Any", "--topic", "t"], "unknown operation"),
    (["add", "--principal", "User:a", "--operation", "Read", "--topic", "a/b"], "invalid topic name"),
    (["add", "--principal", "User:a", "--operation", "Read", "--group", ""], "must not be empty"),
    (["add", "--principal", "User:a", "--operation", "Read"], "name the resource"),
    (["add", "--operation", "Read", "--topic", "t"], "needs --principal"),
    (["add", "--principal", "User:a", "--operation", "Read", "--topic", "t", "--host", "h.example"],
     "expected * or an IP address"),
    (["add", "--principal", "User:a", "--operation", "Read", "--topic", "*", "--prefixed"], "PREFIXED"),
])
def test_bad_acls_are_one_line_errors(cli, argv, message):
    rc, _, err = cli("acls", *argv)
    assert message in one_error_line(rc, err)
    assert list_acls(acl_document(Storage(cli.root))) == []


def test_serve_super_users_need_the_authorizer(cli):
    rc, _, err = cli("serve", "--listen", "127.0.0.1:0", "--super-users", "User:admin")
    assert "--super-users needs --authorizer" in one_error_line(rc, err)
    rc, _, err = cli("serve", "--listen", "127.0.0.1:0", "--authorizer", "--super-users", "admin")
    assert "invalid principal" in one_error_line(rc, err)


def test_serve_authorizer_flags_enforce_the_acls_the_cli_adds(cli, tmp_path):
    from confluent_kafka import KafkaError, Producer

    from kafkastore.topics.admin import create_topic
    from tests.helpers.serve_procs import start_serve, stop_serve

    creds = tmp_path / "users.txt"
    creds.write_text("admin:apw\nalice:bpw\n")
    create_topic(Storage(cli.root), "t", 1)
    assert cli("acls", "add", "--principal", "User:alice", "--operation", "Write", "--topic", "t")[0] == 0
    proc = start_serve(cli.root, extra=["--sasl-credentials", str(creds), "--authorizer",
                                        "--super-users", "User:admin"])
    try:
        def produce(user, password, topic):
            p = Producer({"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password,
                          "message.timeout.ms": 5000, "retries": 0})
            errors = []
            p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
            p.flush(10)
            return errors[0]

        create_topic(Storage(cli.root), "other", 1)
        assert produce("alice", "bpw", "t") is None
        assert produce("alice", "bpw", "other").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce("admin", "apw", "other") is None
    finally:
        stop_serve(proc)
