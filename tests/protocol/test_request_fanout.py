"""One request naming a huge number of partitions must not stall the event loop (the
rule "never run per-partition work proportional to a client's numbers on the event
loop", replayed on OffsetFetch: a 4 MB request naming 1,000,000 partitions froze a serve
process for 11 s, every client's ApiVersions waiting meanwhile)."""
from __future__ import annotations

import struct
import sys
import threading
import time

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.errors import ProtocolError
from kafkastore.protocol.wire import codec, frame_check
from kafkastore.topics.admin import create_topic

from .wire import Wire

ENTRIES = 300_000


def _offset_fetch(n: int):
    cls = codec.request_class(9, 7)
    mod = sys.modules[cls.__module__]
    return codec.make(cls, group_id="fanout", require_stable=False, topics=(
        codec.make(mod, "OffsetFetchRequestTopic", name="fanout", partition_indexes=tuple(range(n))),))


def test_a_huge_offset_fetch_does_not_stall_other_clients(broker, storage):
    create_topic(storage, "fanout", 1)
    request = _offset_fetch(ENTRIES)
    done = threading.Event()

    def big():
        w = Wire(broker.bootstrap, timeout=120)
        try:
            w.call(request)
        except ConnectionError:
            pass  # refused: more array elements than a request may hold
        finally:
            w.close()
            done.set()

    t = threading.Thread(target=big)
    t.start()
    worst = 0.0
    while not done.is_set():
        started = time.monotonic()
        w = Wire(broker.bootstrap, timeout=60)
        w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        w.close()
        worst = max(worst, time.monotonic() - started)
        time.sleep(0.05)
    t.join(120)
    assert worst < 0.5, f"ApiVersions waited {worst:.2f} s behind one OffsetFetch of {ENTRIES} partitions"


def test_a_request_of_more_elements_than_the_limit_is_refused_cheaply():
    """The count is checked when the array's length is read, before any element is walked."""
    request = codec.encode_request(_offset_fetch(frame_check.MAX_REQUEST_ELEMENTS + 1), 1)
    body = request[4:]
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="array elements"):
        codec.decode_request(9, 7, body, _header_size(body))
    assert time.monotonic() - started < 1.0
    ok = codec.encode_request(_offset_fetch(1000), 1)[4:]
    assert len(codec.decode_request(9, 7, ok, _header_size(ok)).topics[0].partition_indexes) == 1000


def _header_size(body: bytes) -> int:
    """Request header v2 of these requests: api key, version, correlation id, client id, tags."""
    (n,) = struct.unpack_from(">h", body, 8)
    return 10 + max(n, 0) + 1
