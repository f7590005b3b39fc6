"""The native and the pure Arrow decoders on the same bytes: both decode them to the same
table, or both refuse them with the same error at the same place."""
from __future__ import annotations

from kafkastore.errors import CorruptRecordError
from kafkastore.format import arrow_decode as ad


def outcome(fn, buf: bytes):
    """``("ok", table)`` or ``(error name, offset, position)`` of one decoder on ``buf``."""
    try:
        return ("ok", fn(buf, topic="t", partition=0, segment="s"))
    except CorruptRecordError as e:
        return (type(e).__name__, e.offset, e.position)


def assert_decoders_agree(buf: bytes) -> None:
    """The native and the pure decoder give the same table, or the same error."""
    a = outcome(ad.decode_to_arrow_native, buf)
    b = outcome(ad.decode_to_arrow_pure, buf)
    if a[0] == "ok" and b[0] == "ok":
        assert a[1].equals(b[1])
    else:
        assert a == b
