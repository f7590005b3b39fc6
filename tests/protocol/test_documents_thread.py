"""The freshness reads of the shared documents (client quotas, ACLs) do not wait behind the
I/O pool.

A decision never uses quotas or ACLs older than their bound: a request that finds them
older waits for a fresh read, at most 5 s, then gets a retriable error. On a slow store
every I/O thread can sit in a commit for seconds; when the background refresh and that
fresh read queued behind them, the documents went stale and requests that touch no data
failed (the fault harness's S3 runs: thousands of "the quotas could not be read within
5 s", and transactions that barely committed). Those reads have threads of their own.
"""
from __future__ import annotations

import threading
import time

from kio.schema.metadata.v12 import request as md_req

from kafkastore.protocol.fencing import FRESH_READ_WAIT_S, quota_bound_s
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.protocol.wire import codec
from kafkastore.storage import Storage

from .wire import Wire


def test_a_busy_io_pool_does_not_fail_requests_on_stale_quotas(tmp_path):
    broker = BrokerThread(Storage(f"file://{tmp_path}"),
                          ServeOptions(port=0, io_threads=2, quota_refresh_s=0.2))
    broker.start()
    w = Wire(broker.bootstrap, timeout=30)
    try:
        server = broker.server
        release = threading.Event()
        busy = [server.pool.submit(release.wait, 60) for _ in range(2)]   # every I/O thread
        time.sleep(quota_bound_s(server) + 0.5)   # the quotas in hand pass their bound
        request = md_req.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)
        cid = w.send(request)
        # Held past the fresh read's wait: a quota read queued behind the I/O pool fails
        # the request; one on its own thread lets it go on once the pool frees up.
        time.sleep(FRESH_READ_WAIT_S + 1)
        release.set()
        for f in busy:
            f.result(10)
        got, resp = codec.decode_response(w.recv_frame(), md_req.MetadataRequest.__api_key__,
                                          md_req.MetadataRequest.__version__)
        assert got == cid
        # An error answer to Metadata is an empty one (no brokers, no cluster id).
        assert [b.node_id for b in resp.brokers] == [server.node_id], "answered with an error"
    finally:
        w.close()
        broker.stop()
