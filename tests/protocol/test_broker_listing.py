"""Metadata keeps listing a broker for a while after it died (see
kafkastore.protocol.membership.LISTED_AFTER_DEATH_MS): it leads and coordinates nothing meanwhile.
A broker that shut down cleanly is dropped at once."""
from __future__ import annotations

from kafkastore.protocol.membership import LISTED_AFTER_DEATH_MS, BrokerMembership
from kafkastore.storage import Storage


def test_a_departed_broker_stays_listed_then_goes(tmp_path):
    now = [1_000.0]
    storage = Storage(f"file://{tmp_path}/root")
    a = BrokerMembership(storage, clock=lambda: now[0])
    b = BrokerMembership(storage, clock=lambda: now[0])
    a.register(0, "127.0.0.1", 9092)
    b.register(1, "127.0.0.1", 9093)
    a.refresh()
    assert [n for n, _, _ in a.live_cached()] == [0, 1]
    now[0] += 10  # b's heartbeat is stale: not live, still listed
    a.heartbeat()
    assert [n for n, _, _ in a.live_cached()] == [0]
    assert a.listed_cached() == [(0, "127.0.0.1", 9092), (1, "127.0.0.1", 9093)]
    assert a.listed_cached("SSL") == []
    now[0] += LISTED_AFTER_DEATH_MS / 1000 - 20
    a.heartbeat()
    assert [n for n, _, _ in a.listed_cached()] == [0, 1]
    now[0] += 30
    a.heartbeat()
    assert [n for n, _, _ in a.listed_cached()] == [0]
    # The id taken again by a live broker: listed once, at its new address.
    c = BrokerMembership(storage, clock=lambda: now[0])
    c.register(1, "127.0.0.1", 9999)
    a.refresh()
    assert a.listed_cached() == [(0, "127.0.0.1", 9092), (1, "127.0.0.1", 9999)]


def test_a_broker_that_shut_down_cleanly_is_not_listed(tmp_path):
    now = [1_000.0]
    storage = Storage(f"file://{tmp_path}/root")
    a = BrokerMembership(storage, clock=lambda: now[0])
    b = BrokerMembership(storage, clock=lambda: now[0])
    a.register(0, "127.0.0.1", 9092)
    b.register(1, "127.0.0.1", 9093)
    a.refresh()
    b.deregister()
    a.refresh()
    assert a.listed_cached() == [(0, "127.0.0.1", 9092)]
    now[0] += 10  # and it does not come back when its (removed) heartbeat would have expired
    a.heartbeat()
    assert a.listed_cached() == [(0, "127.0.0.1", 9092)]
