"""``kafkastore serve`` as a subprocess for the benchmarks (its own interpreter, as in
production) on a port of 127.0.0.1 it picks: start it, wait until it serves, stop it.

    broker = start_broker(root, "--commit-interval-ms", "5")
    try:
        port = wait_serving(broker)
        ...
    finally:
        stop_broker(broker)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

_SERVING = re.compile(r" serving .* on \S+:(\d+) \(advertised")


def start_broker(root: str, *flags: str, env: dict | None = None) -> subprocess.Popen:
    """``kafkastore --root ROOT serve --listen 127.0.0.1:0 FLAGS...`` started (not yet serving:
    see :func:`wait_serving`).

    ``KAFKASTORE_BENCH_BROKER_MAIN`` (environment) names a script run instead of
    ``-m kafkastore.cli`` with the same arguments: a wrapper that profiles the broker
    inside its own process (it ends with ``runpy.run_module("kafkastore.cli", run_name="__main__")``).
    """
    wrapper = (env if env is not None else os.environ).get("KAFKASTORE_BENCH_BROKER_MAIN")
    main = [wrapper] if wrapper else ["-m", "kafkastore.cli"]
    return subprocess.Popen(
        [sys.executable, *main, "--root", root, "serve", "--listen", "127.0.0.1:0",
         *flags], stdout=subprocess.PIPE, text=True, env=env)


def wait_serving(broker: subprocess.Popen) -> int:
    """The port the broker serves on, from its first line; exits the benchmark (status 1, the
    line on stderr) when that line does not say it serves."""
    line = broker.stdout.readline()
    found = _SERVING.search(line)
    if found is None:
        sys.exit(f"broker did not start: {line!r}")
    return int(found.group(1))


def stop_broker(broker: subprocess.Popen) -> None:
    """SIGTERM (the broker's graceful stop), SIGKILL after 30 s."""
    broker.terminate()
    try:
        broker.wait(30)
    except subprocess.TimeoutExpired:
        broker.kill()
