"""Brokers of different listener security on one root: plaintext ones
and SASL ones (user ``alice``, password ``pw``), each knowing the others."""
from __future__ import annotations

import contextlib

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage


def plain() -> ServeOptions:
    """A plaintext listener."""
    return ServeOptions(port=0, heartbeat_ms=200)


def sasl() -> ServeOptions:
    """A SASL listener (``alice`` / ``pw``)."""
    return ServeOptions(port=0, heartbeat_ms=200, credentials={"alice": "pw"})


@contextlib.contextmanager
def brokers(root: str, *options: ServeOptions):
    """One :class:`BrokerThread` over ``root`` per ``options``, started in order and stopped
    in reverse; every broker's registry is read once they all run, so each sees the others."""
    with contextlib.ExitStack() as stack:
        threads = [stack.enter_context(BrokerThread(Storage(root), o)) for o in options]
        for b in threads:
            b.server.brokers.refresh()
        yield threads
