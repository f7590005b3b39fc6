"""A broker's lease does not wait behind its I/O pool.

Every request's store work runs on the broker's I/O pool, and on a slow or failing store
(the fault harness's S3 latency spells and 503 storms) all of its threads can sit in
commits for many seconds. A heartbeat queued behind them sends its registration put late,
the lease lapses, and the broker fences itself: it drops the groups and transactions it
coordinates although it was never paused. The heartbeat runs on a thread of its own.
"""
from __future__ import annotations

import threading
import time

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage


def test_a_busy_io_pool_does_not_make_the_broker_fence_itself(tmp_path):
    broker = BrokerThread(Storage(f"file://{tmp_path}"),
                          ServeOptions(port=0, heartbeat_ms=300, io_threads=2))
    broker.start()
    try:
        server = broker.server
        window_s = server.brokers.expiry_ms / 1000
        release = threading.Event()
        busy = [server.pool.submit(release.wait, 30) for _ in range(2)]   # every I/O thread
        time.sleep(window_s * 1.5)
        release.set()
        for f in busy:
            f.result(10)
        time.sleep(0.5)   # a heartbeat queued behind them runs now, and fences if late
        assert server.brokers.fence_epoch == 0, "the broker fenced itself while not paused"
        assert server.brokers.authority_valid()
    finally:
        broker.stop()
