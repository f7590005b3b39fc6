"""A broker serving the schema registry too (tests/schema_registry/)."""
from __future__ import annotations

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage


def start_broker(root: str) -> BrokerThread:
    """A broker on 127.0.0.1 with its schema registry, both on ephemeral ports
    (``b.server.schema_registry.url``)."""
    return BrokerThread(Storage(root), ServeOptions(
        port=0, commit_interval_ms=2, heartbeat_ms=500,
        schema_registry_listen=("127.0.0.1", 0))).start()
