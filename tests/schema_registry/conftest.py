"""Fixtures: a broker over a file root serving the schema registry too (one per module)."""
from __future__ import annotations

import pytest

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage


def start_broker(root: str) -> BrokerThread:
    """A broker on 127.0.0.1 with its schema registry, both on ephemeral ports."""
    return BrokerThread(Storage(root), ServeOptions(
        port=0, commit_interval_ms=2, heartbeat_ms=500,
        schema_registry_listen=("127.0.0.1", 0))).start()


@pytest.fixture(scope="module")
def module_root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("registry-root"))


@pytest.fixture(scope="module")
def broker(module_root):
    b = start_broker(module_root)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def registry_url(broker):
    return broker.server.schema_registry.url
