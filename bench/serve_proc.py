"""``kafkastore serve`` as a subprocess for the benchmarks (its own interpreter, as in
production) on a free port of 127.0.0.1: start it, wait for its ``serving`` line, stop it.

    broker, port = start_broker(root, "--commit-interval-ms", "5")
    try:
        wait_serving(broker)
        ...
    finally:
        stop_broker(broker)
"""
from __future__ import annotations

import socket
import subprocess
import sys


def free_port() -> int:
    """A port of 127.0.0.1 free now (the broker binds it a moment later)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_broker(root: str, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """``kafkastore --root ROOT serve --listen 127.0.0.1:PORT FLAGS...`` started (not yet
    serving: see :func:`wait_serving`); (the process, its port)."""
    port = free_port()
    broker = subprocess.Popen(
        [sys.executable, "-m", "kafkastore.cli", "--root", root, "serve", "--listen", f"127.0.0.1:{port}",
         *flags], stdout=subprocess.PIPE, text=True, env=env)
    return broker, port


def wait_serving(broker: subprocess.Popen) -> None:
    """Wait for the broker's first line; exit the benchmark (status 1, the line on stderr)
    unless it says the broker is serving."""
    line = broker.stdout.readline()
    if "serving" not in line:
        sys.exit(f"broker did not start: {line!r}")


def stop_broker(broker: subprocess.Popen) -> None:
    """SIGTERM (the broker's graceful stop), SIGKILL after 30 s."""
    broker.terminate()
    try:
        broker.wait(30)
    except subprocess.TimeoutExpired:
        broker.kill()
