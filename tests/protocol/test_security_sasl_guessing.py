"""Guessing SASL passwords on the Kafka listener is bounded per client address: past its
budget of failed logins an address's logins are refused before any check and its new
connections closed at accept, while clients from other addresses log in and produce."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.sasl_logins import plain_login, scram_guess

BUDGET = 8
USERS = {"alice": "alice-pw"}


@pytest.fixture
def broker(tmp_path):
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "t", 1)
    # A long window: the lockout cannot lapse while the test runs, however slow the machine.
    opts = ServeOptions(port=0, credentials=USERS, commit_interval_ms=2,
                        sasl_max_failed_logins_per_ip=BUDGET, sasl_failed_login_window_ms=120_000)
    with BrokerThread(Storage(root), opts) as b:
        yield b


def test_plain_guessing_is_cut_off_per_address_while_others_log_in(broker):
    outcomes = [plain_login(broker.bootstrap, "127.0.0.2", "alice", f"guess{i}") for i in range(40)]
    # At most the budget's worth of guesses were checked; every later one was refused unchecked.
    assert outcomes.count("failed") == BUDGET, outcomes
    assert outcomes[BUDGET:] == ["refused"] * (40 - BUDGET), outcomes
    # Even the right password is refused from the guessing address while it is locked out...
    assert plain_login(broker.bootstrap, "127.0.0.2", "alice", "alice-pw") == "refused"
    # ...but another address logs in, with the raw protocol and with a real client.
    assert plain_login(broker.bootstrap, "127.0.0.1", "alice", "alice-pw") == "ok"
    p = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                  "sasl.password": "alice-pw", "message.timeout.ms": 10000})
    errors = []
    p.produce("t", b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors == [None]


def testscram_guessing_is_cut_off_per_address(broker):
    outcomes = [scram_guess(broker.bootstrap, "127.0.0.3", f"ghost{i}") for i in range(30)]
    assert outcomes.count("failed") == BUDGET, outcomes
    assert outcomes[BUDGET:] == ["refused"] * (30 - BUDGET), outcomes
    assert plain_login(broker.bootstrap, "127.0.0.4", "alice", "alice-pw") == "ok"


def test_failed_logins_from_one_address_do_not_count_against_another(broker):
    for i in range(BUDGET - 1):
        assert plain_login(broker.bootstrap, "127.0.0.5", "alice", f"x{i}") == "failed"
    for i in range(BUDGET - 1):
        assert plain_login(broker.bootstrap, "127.0.0.6", "alice", f"y{i}") == "failed"
    assert plain_login(broker.bootstrap, "127.0.0.5", "alice", "alice-pw") == "ok"
    assert plain_login(broker.bootstrap, "127.0.0.6", "alice", "alice-pw") == "ok"
