"""Type stubs of ``kafkastore._jsonl_native`` (source: ``_jsonl_native.c``), the C fast path
of :mod:`kafkastore.jsonl_bulk`."""
from typing import Optional, Tuple

from typing_extensions import Buffer as _Bytes

class Buffer:
    """A read-only column buffer (buffer protocol, zero copy)."""

# (nulls, validity bitmap or None, int32 offsets, data) and (nulls, validity or None, int64 values)
_Binary = Tuple[int, Optional[Buffer], Buffer, Buffer]
_Int64 = Tuple[int, Optional[Buffer], Buffer]

def parse_jsonl(buf: _Bytes, max_ts: int) -> Optional[Tuple[int, _Binary, _Binary, _Int64, _Int64]]:
    """Produce input lines of the common shape as Arrow buffers; None for a line the fast
    path does not take."""
