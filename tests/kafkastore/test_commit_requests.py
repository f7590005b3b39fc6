"""What one manifest commit costs in store requests on S3, counted at the wire (the fault
harness's proxy in front of moto's server, no fault scheduled): a count, so it cannot grow
back unnoticed. Every request of a transaction's commits on S3 is paid under the store's
latency, and each extra one made transactions time out in the fault harness's S3 runs."""
from __future__ import annotations

import uuid
from collections import Counter

import pytest

from kafkastore import layout
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.manifest import AppendSegments, ManifestStore, SegmentEntry
from kafkastore.storage import Storage
from kafkastore.format.crc import crc32c
from tests.helpers.jepsen.s3_fault_proxy import FaultProxy
from tests.helpers.segments import simple_batches

T, P = "events", 0


@pytest.fixture
def proxied(s3_endpoint):
    """A Storage on a fresh S3 root reached through a counting proxy."""
    proxy = FaultProxy(s3_endpoint).start()
    try:
        storage = Storage(f"s3://kafkastore-test/commit-requests-{uuid.uuid4().hex[:8]}",
                          {"endpoint_url": proxy.endpoint, "key": "testing",
                           "secret": "testing"})
        yield storage, proxy
    finally:
        proxy.stop()


def _upload(storage: Storage, base: int) -> SegmentEntry:
    """One small segment as the broker writes it: the .log alone (its indexes are empty,
    so never written)."""
    builder = SegmentBuilder(base)
    for batch in simple_batches(base, 1):
        builder.append(batch)
    built = builder.build()
    sid = layout.new_segment_id()
    storage.put(layout.segment_path(T, P, base, sid, ".log"), built.log)
    st = built.stats
    return SegmentEntry(base_offset=base, next_offset=st.next_offset,
                        record_count=st.record_count, size=len(built.log),
                        min_timestamp=st.min_timestamp, max_timestamp=st.max_timestamp,
                        segment_id=sid, writer_id=1, leader_epoch=0,
                        checksum=crc32c(built.log), index_size=0, timeindex_size=0,
                        max_timestamp_offset=st.offset_of_max_timestamp)


def _kinds(trace) -> Counter:
    return Counter(f"{method}{'!' if cond else ''} "
                   f"{'manifest' if '/_manifest/' in path else 'segment' if path.endswith('.log') else path}"
                   for method, path, cond in trace)


def test_an_append_commit_on_a_warm_partition_costs_four_store_requests(proxied):
    storage, proxy = proxied
    store = ManifestStore(storage, T, P)
    for _ in range(2):   # warm: the head is this store's own last commit
        entry = _upload(storage, store.latest().high_watermark if store.latest() else 0)
        store.commit(lambda m, e=entry: ([AppendSegments((e,))], []))
    hw = store.latest().high_watermark
    proxy.trace = []
    entry = _upload(storage, hw)
    store.commit(lambda m: ([AppendSegments((entry,))], []))
    used = _kinds(proxy.trace)
    proxy.trace = None
    # The segment's PUT; the read of the slot after the head (one GET answered 404: nobody
    # committed since); the probe of the slot after that (one GET answered 404: a version
    # stored there would make the put a fork); the conditional PUT. No upload-age check
    # (this process wrote the file: its age is known), no existence check of the segment's
    # empty indexes (never written), no HEAD before a GET, no LIST behind a 404.
    assert used == Counter({"PUT segment": 1, "GET manifest": 2, "PUT! manifest": 1}), used
