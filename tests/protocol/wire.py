"""A minimal raw Kafka-protocol client for tests: kio entities over a socket."""
from __future__ import annotations

import socket
import struct

from kafkastore.protocol.wire import codec


class Wire:
    """One connection; ``call(request)`` sends it and decodes the response of the same version."""

    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def send(self, entity) -> int:
        self.correlation += 1
        self.sock.sendall(codec.encode_request(entity, self.correlation))
        return self.correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """The next response frame (without its size), None when the broker closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, entity):
        cid = self.send(entity)
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        got, response = codec.decode_response(frame, type(entity).__api_key__, type(entity).__version__)
        if got != cid:
            raise AssertionError(f"correlation id {got}, expected {cid}")
        return response

    def closed(self) -> bool:
        """Whether the broker closed the connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()
