"""SCRAM users stored under the root: derivation as RFC 5802/7677, Kafka's
rules for changes, and ``kafkastore users add|list|remove``."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from kafkastore.cli.entry import main
from kafkastore.errors import ScramCredentialError
from kafkastore.cluster.scram import (STALE, Deletion, ScramUsers, Upsertion, credential_from_password,
                                      plan_alter, salted_password)
from kafkastore.storage import Storage
from tests.helpers.cli import cli_runner, one_error_line


def test_stored_keys_verify_the_rfc_7677_exchange():
    """RFC 7677's SCRAM-SHA-256 example: the stored keys check its client proof and give its
    server signature (so any RFC client logs in with what we store)."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = credential_from_password("SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    auth = ("n=user,r=rOprNGfwEbeRWgbNEkqO,"
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0").encode()
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    signature = hmac.new(cred.stored_key, auth, hashlib.sha256).digest()
    client_key = bytes(a ^ b for a, b in zip(proof, signature))
    assert hashlib.sha256(client_key).digest() == cred.stored_key
    assert base64.b64encode(hmac.new(cred.server_key, auth, hashlib.sha256).digest()) == \
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _up(user, mech="SCRAM-SHA-512", iterations=4096):
    salt = b"0123456789abcdef"
    return Upsertion(user, mech, iterations, salt, salted_password(mech, "pw", salt, iterations))


def test_a_refused_change_leaves_that_user_as_it_was_and_the_others_change():
    doc, errors = plan_alter({}, [], [_up("a"), _up("b", iterations=100)])
    assert errors["a"] is None and errors["b"].kind == "unacceptable"
    assert set(doc["users"]) == {"a"}
    doc2, errors = plan_alter(doc, [Deletion("a", "SCRAM-SHA-512"), Deletion("a", "SCRAM-SHA-256")], [_up("c")])
    assert errors["a"].kind == "not_found" and errors["c"] is None
    assert set(doc2["users"]) == {"a", "c"}          # a's deletion of 512 was not applied either
    doc3, errors = plan_alter(doc2, [Deletion("a", "SCRAM-SHA-512")], [_up("a", "SCRAM-SHA-512")])
    assert errors["a"].kind == "duplicate" and doc3 == doc2
    doc4, errors = plan_alter(doc2, [Deletion("a", 2)], [])  # Kafka's wire code for SCRAM-SHA-512
    assert errors == {"a": None} and set(doc4["users"]) == {"c"}
    bad = Upsertion("x", "SCRAM-SHA-1", 4096, b"salt", b"salted")
    assert plan_alter(doc4, [], [bad])[1]["x"].kind == "mechanism"


def test_users_cli(capsys, monkeypatch, local_root):
    run = cli_runner(main, capsys, monkeypatch, local_root)
    assert run("users", "list")[1].strip() == "{}"
    assert run("users", "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin", stdin="s3cret\n")[0] == 0
    assert run("users", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
               "--password", "other")[0] == 0
    assert json.loads(run("users", "list")[1]) == {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}
    stored = ScramUsers(Storage(local_root)).lookup("alice", "SCRAM-SHA-256")
    again = credential_from_password("SCRAM-SHA-256", "s3cret", salt=stored.salt)
    assert again == stored  # the password (stdin's first line, no newline) is what was hashed

    for argv, why in [(["users", "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password", "x",
                        "--iterations", "100"], "too few iterations"),
                      (["users", "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password", "x",
                        "--iterations", "20000"], "too many iterations"),
                      (["users", "add", "bad\tname", "--mechanism", "SCRAM-SHA-256", "--password", "x"],
                       "control characters"),
                      (["users", "add", "x" * 300, "--mechanism", "SCRAM-SHA-256", "--password", "x"],
                       "more than 255"),
                      (["users", "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password-stdin"],
                       "must not be empty"),
                      (["users", "remove", "bob"], "no SCRAM user 'bob'"),
                      (["users", "remove", "alice", "--mechanism", "SCRAM-SHA-512", "--mechanism",
                        "SCRAM-SHA-512"], None)]:
        rc, _, err = run(*argv, stdin="\n")
        if why is not None:
            assert why in one_error_line(rc, err)
    assert json.loads(run("users", "list")[1]) == {"alice": {"SCRAM-SHA-256": 4096}}
    assert run("users", "remove", "alice")[0] == 0
    assert json.loads(run("users", "list")[1]) == {}
    with pytest.raises(SystemExit):  # argparse: a mechanism we do not know
        main(["--root", local_root, "users", "add", "x", "--mechanism", "PLAIN", "--password", "p"])


def test_a_broker_sees_another_brokers_change_within_max_age(local_root):
    now = [0.0]
    broker = ScramUsers(Storage(local_root), max_age_s=2.0, clock=lambda: now[0])
    admin = ScramUsers(Storage(local_root))
    assert broker.lookup("amy", "SCRAM-SHA-256") is None
    admin.add("amy", "SCRAM-SHA-256", "pw")
    now[0] = 1.9
    assert broker.cached_lookup("amy", "SCRAM-SHA-256") is None  # fresh enough: no read
    now[0] = 2.0
    assert broker.cached_lookup("amy", "SCRAM-SHA-256") is STALE
    assert broker.lookup("amy", "SCRAM-SHA-256") == admin.lookup("amy", "SCRAM-SHA-256")
    admin.remove("amy")
    broker.add("bob", "SCRAM-SHA-512", "pw")  # its own change: seen at once, with the other's
    assert broker.lookup("amy", "SCRAM-SHA-256") is None and broker.lookup("bob", "SCRAM-SHA-512")
