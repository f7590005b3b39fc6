"""`kafkastore serve` as a subprocess on 127.0.0.1 (the broker as it runs in production)."""
from __future__ import annotations

import signal
import socket
import subprocess
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


def stop_serve(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
