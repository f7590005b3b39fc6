"""Fuzzing the request decoder (run in a child process with a memory limit by test_malformed.py).

Random frames for every API key and version the broker serves: random bytes,
and valid requests (re-encoded from what decoded) with a length or count
mutated. Each must decode or raise ProtocolError, within the memory limit.
"""
from __future__ import annotations

import io
import random
import struct
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import ProtocolError
from kafkastore.protocol.wire import codec, frame_check


def served() -> list[tuple[int, int]]:
    from kafkastore.protocol.families import register_families
    from kafkastore.protocol.handler_table import HandlerTable

    reg = HandlerTable()
    register_families(reg, sasl_enabled=True)   # every API a broker serves
    return [(k, v) for k, lo, hi in reg.api_versions() for v in range(lo, hi + 1)]


SERVED = served()


def _encode(entity) -> bytes:
    out = io.BytesIO()
    codec._writer(type(entity))(out, entity)
    return out.getvalue()


def _decode(key: int, version: int, body: bytes):
    try:
        return codec.decode_request(key, version, body, 0)
    except ProtocolError:
        return None


@settings(max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SERVED), st.binary(max_size=64), st.data())
def fuzz(kv, body, data):
    key, version = kv
    entity = _decode(key, version, body)
    if entity is None:
        return
    # What decoded re-encodes to a body the walk accepts whole, and decodes to the same entity.
    again = _encode(entity)
    cls = codec.request_class(key, version)
    assert frame_check.check_body(cls, again, 0) == len(again)
    assert codec.decode_request(key, version, again, 0) == entity
    # Any byte of it turned into a huge length or count: refused or decoded, never a crash.
    if again:
        pos = data.draw(st.integers(0, len(again) - 1))
        huge = data.draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\x7f\xff"]))
        _decode(key, version, again[:pos] + huge + again[pos + len(huge):])


def main() -> None:
    fuzz()
    # Every served request with every array / string position claiming a huge length.
    rnd = random.Random(1)
    for key, version in SERVED:
        for _ in range(30):
            body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 24)))
            pos = rnd.randrange(len(body))
            _decode(key, version, body[:pos] + b"\xff\xff\xff\xff\x0f" + body[pos:])
            _decode(key, version, body[:pos] + struct.pack(">i", 0x7FFFFFFF) + body[pos:])
    print("ok", len(SERVED))


if __name__ == "__main__":
    main()
