"""A broker's lease on a slow store: the heartbeat's registration put and its refresh of the
live brokers (a listing and a read per broker) are round trips, and the lease runs from the
last put's send. A refresh that takes a good part of the window must not push the next put
past it: under the fault harness's S3 latency spells the brokers lost their lease dozens of
times in ten minutes, and each loss drops the transactions and groups they coordinate."""
from __future__ import annotations

from kafkastore.clock import ManualClock
from kafkastore.protocol.membership import BrokerMembership
from kafkastore.storage import Storage

ROUND_TRIP_S = 1.4   # each store request, as a latency spell makes it


class SlowStorage(Storage):
    """A local store whose requests each take ROUND_TRIP_S on the manual clock."""

    def __init__(self, url, clock):
        super().__init__(url, clock=clock)
        self.requests = 0

    def _slow(self):
        self.requests += 1
        self.clock.advance(ROUND_TRIP_S)

    def put(self, rel, data):
        self._slow()
        return super().put(rel, data)

    def get(self, rel):
        self._slow()
        return super().get(rel)

    def list(self, prefix=""):
        self._slow()
        return super().list(prefix)


def test_a_slow_refresh_renews_the_lease_before_the_next_interval(tmp_path):
    clock = ManualClock()
    storage = SlowStorage(f"file://{tmp_path}", clock)
    others = [BrokerMembership(Storage(f"file://{tmp_path}", clock=clock), heartbeat_ms=3000,
                               clock=clock) for _ in range(2)]
    for i, other in enumerate(others, start=1):
        other.register(i, "127.0.0.1", 9092 + i)
    reg = BrokerMembership(storage, heartbeat_ms=3000, clock=clock)
    reg.register(0, "127.0.0.1", 9092)
    fenced = []
    reg.on_fence(fenced.append)
    for _ in range(5):
        # The serve loop: wait an interval, then heartbeat (put, then refresh).
        clock.advance(3.0)
        for other in others:
            other.heartbeat()
        reg.heartbeat()
        assert len(reg.live_cached()) == 3
    # A put, a listing and three reads at 1.4 s each, then a 3 s wait: the next put would
    # be sent 10 s after the last one, past the 9 s window, had the slow refresh not
    # renewed the lease again.
    assert not fenced
    assert reg.authority_valid()
