"""A broker's authority lease: measured on its own monotonic clock against its last
successful heartbeat; once it lapsed the broker fences itself (bumps its fence epoch, calls
the on-fence callbacks, ends the lease) before it acts as a coordinator again."""
from __future__ import annotations

import json

from kafkastore.clock import ManualClock
from kafkastore.protocol.membership import BrokerMembership
from kafkastore.storage import Storage


def _registry(tmp_path, clock):
    reg = BrokerMembership(Storage(f"file://{tmp_path}", clock=clock), heartbeat_ms=1000, clock=clock)
    reg.register(0, "127.0.0.1", 9092)
    return reg


def test_a_pause_past_the_liveness_window_fences_even_when_the_heartbeat_runs_first(tmp_path):
    clock = ManualClock()
    reg = _registry(tmp_path, clock)
    fenced = []
    reg.on_fence(fenced.append)
    token = reg.authority()
    assert token == reg.fence_epoch and reg.authority_valid()
    clock.advance(2.9)
    reg.heartbeat()                               # in time: nothing lost
    assert reg.authority() == token and not fenced
    clock.advance(3.5)                            # paused longer than the window (3 s)
    assert reg.authority() is None and reg.lease_lapsed()
    reg.heartbeat()                               # the heartbeat thread resumes first...
    assert len(fenced) == 1                       # ...and fences before it renews the lease
    assert reg.authority_valid() and reg.authority() != token
    assert not reg.fence_if_lapsed()              # once per lapse


def test_a_registration_taken_by_another_broker_fences(tmp_path):
    clock = ManualClock()
    reg = _registry(tmp_path, clock)
    fenced = []
    reg.on_fence(fenced.append)
    doc = json.loads(reg.storage.get("_brokers/0.json"))
    reg.storage.put("_brokers/0.json", json.dumps({**doc, "instance": "someone-else"}).encode())
    reg.refresh()
    assert fenced and "another broker" in fenced[0]
    assert not reg.authority_valid()
