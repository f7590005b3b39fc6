"""Malformed requests never crash or stall the broker."""
from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.errors import ProtocolError
from kafkastore.protocol.wire import codec, frame_check

from .wire import Wire
from tests.helpers.serve_procs import start_serve, stop_serve

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Metadata v12 (flexible): header (api 3, v12, correlation 1, null client id, no tags) and a
#: topics array claiming 2^32 - 2 elements: kio's reader allocated 34 GB for it and aborted.
HUGE_ARRAY = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x0f"


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_decoder_refuses_lengths_past_the_frame():
    body = HUGE_ARRAY[11:]
    try:
        codec.decode_request(3, 12, HUGE_ARRAY, 11)
    except ProtocolError as exc:
        assert "claims 4294967294 elements" in str(exc)
    else:
        raise AssertionError("accepted")
    cls = codec.request_class(3, 12)
    assert frame_check.check_body(cls, b"\x01\x01\x00\x00", 0) == 4
    for bad in (body, b"\x02\x00", b"\x05" + b"\x00" * 3):
        try:
            frame_check.check_body(cls, bad, 0)
        except ProtocolError:
            continue
        raise AssertionError(bad)


def test_decoder_fuzz_bounded_memory_and_time():
    """Hypothesis over every served API key and version, in a child with a 3 GB address-space limit
    (an unbounded allocation aborts it) and a time limit."""
    proc = subprocess.run([sys.executable, "-m", "tests.protocol.decoder_fuzz", "400"], cwd=ROOT_DIR,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok")


def test_metadata_with_trailing_padding_is_accepted():
    """librdkafka's Metadata v12 for all topics: null topics array in a 4-byte slot (3 padding bytes)."""
    req = codec.decode_request(3, 12, b"\x00\x00\x00\x00\x01\x00\x00", 0)
    assert req.topics is None


def test_huge_array_request_leaves_the_broker_alive(tmp_path):
    proc = start_serve(f"file://{tmp_path}/r")
    try:
        w = Wire(proc.bootstrap, timeout=10)
        w.send_raw(codec.frame(HUGE_ARRAY))
        assert w.recv_frame() is None  # connection closed, not answered
        w.close()
        assert proc.poll() is None
        w = Wire(proc.bootstrap, timeout=10)
        assert int(w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
                   .error_code) == 0
        w.close()
    finally:
        stop_serve(proc)

