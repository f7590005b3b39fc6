"""Fixtures: one in-process broker per test module over a file root."""
from __future__ import annotations

import pytest

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage


@pytest.fixture(scope="module")
def module_root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("serve-root"))


@pytest.fixture(scope="module")
def broker(module_root):
    """A broker on 127.0.0.1 (ephemeral port) with a 2 ms group commit."""
    b = BrokerThread(Storage(module_root), ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def storage(module_root):
    return Storage(module_root)
