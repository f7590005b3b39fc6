"""``kafkastore quotas set|list|delete``: the root's shared client quotas from the CLI."""
from __future__ import annotations

import json

import pytest

from kafkastore.cli.entry import main
from kafkastore.cluster.documents import ClusterDocument
from kafkastore.protocol.quotas import QuotaConfig
from kafkastore.storage import Storage
from tests.helpers.cli import cli_runner, one_error_line


@pytest.fixture
def run(capsys, monkeypatch, local_root):
    return cli_runner(main, capsys, monkeypatch, local_root)


def test_set_list_delete(run):
    assert run("quotas", "set", "--user", "alice", "--producer-byte-rate", "1000",
               "--consumer-byte-rate", "2000")[0] == 0
    assert run("quotas", "set", "--default-user", "--client-id", "app",
               "--request-percentage", "12.5")[0] == 0
    assert run("quotas", "set", "--default-client-id", "--producer-byte-rate", "50")[0] == 0
    rc, out, _ = run("quotas", "list")
    assert rc == 0
    listed = {e["path"]: e["values"] for e in json.loads(out)}
    assert listed == {"/users/alice": {"producer_byte_rate": 1000, "consumer_byte_rate": 2000},
                      "/users/<default>/clients/app": {"request_percentage": 12.5},
                      "/clients/<default>": {"producer_byte_rate": 50}}
    # what a broker would enforce
    config = QuotaConfig(ClusterDocument(Storage(run.root), "quotas").refresh())
    assert config.lookup("producer_byte_rate", "alice", "x").bound == 1000
    assert config.lookup("producer_byte_rate", "bob", "x").bound == 50

    assert run("quotas", "delete", "--user", "alice", "--quota", "producer_byte_rate")[0] == 0
    assert run("quotas", "delete", "--default-client-id")[0] == 0
    listed = {e["path"]: e["values"] for e in json.loads(run("quotas", "list")[1])}
    assert listed == {"/users/alice": {"consumer_byte_rate": 2000},
                      "/users/<default>/clients/app": {"request_percentage": 12.5}}


@pytest.mark.parametrize("argv, why", [
    (["--user", "bob", "--consumer-byte-rate", "0"], "must be > 0"),
    (["--user", "bob", "--producer-byte-rate", "-5"], "must be > 0"),
    (["--user", "bob", "--request-percentage", "-1"], "must be > 0"),
    (["--user", "bob", "--producer-byte-rate", "1.5"], "whole number"),
    (["--producer-byte-rate", "5"], "needs a user, a client id"),
    (["--user", "bob"], "needs at least one of"),
    (["--user", "bad\nname", "--producer-byte-rate", "5"], "invalid user name"),
    (["--client-id", "", "--producer-byte-rate", "5"], "invalid client-id name"),
    (["--user", "<default>", "--producer-byte-rate", "5"], "is reserved"),
])
def test_bad_values_and_names_are_refused_in_one_line(run, argv, why):
    rc, _, err = run("quotas", "set", *argv)
    assert why in one_error_line(rc, err)
    assert json.loads(run("quotas", "list")[1]) == []
