"""`kafkastore serve` as a subprocess on 127.0.0.1 (the broker as it runs in production)."""
from __future__ import annotations

import signal
import socket
import subprocess
import time
import sys
from typing import Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (at the time of asking)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_serve(root: str, port: int = 0, node_id: int = 0, extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start a broker on ``root`` at 127.0.0.1:``port`` (0: any free port) with the ``serve``
    flags ``extra``; returns once it serves, with its address in ``proc.bootstrap``."""
    proc = subprocess.Popen([sys.executable, "-m", "kafkastore.cli", "--root", root, "serve",
                             "--listen", f"127.0.0.1:{port}", "--node-id", str(node_id), "-v", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert "serving" in line, line
    proc.bootstrap = line.split(" on ", 1)[1].split()[0]
    return proc


def wait_until_listed(bootstraps: Sequence[str], timeout: float = 30.0) -> None:
    """Wait until every broker's Metadata lists all of ``bootstraps``. A client that has seen
    only one broker re-bootstraps when that broker dies (librdkafka), which is not the
    two-broker failover a test means to exercise."""
    from kio.schema.metadata.v12 import request as md_req

    from tests.protocol.wire import Wire

    want = sorted(int(b.rsplit(":", 1)[1]) for b in bootstraps)
    deadline = time.monotonic() + timeout
    for bootstrap in bootstraps:
        while True:
            w = Wire(bootstrap, timeout=10)
            try:
                resp = w.call(md_req.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
            finally:
                w.close()
            if sorted(int(b.port) for b in resp.brokers) == want:
                break
            assert time.monotonic() < deadline, f"{bootstrap} lists {resp.brokers}, not all of {bootstraps}"
            time.sleep(0.1)


def stop_serve(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def metrics_port(proc) -> int:
    """The metrics listener's port, read from the lines a ``serve`` process prints at start."""
    for _ in range(5):
        line = proc.stdout.readline()
        if "metrics on" in line:
            return int(line.rsplit(":", 1)[1])
    raise AssertionError("serve printed no metrics address")
