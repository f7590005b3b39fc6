"""What a broker checks before it serves a request (docs/DESIGN.md, "Fencing model").

* Its authority lease (:meth:`~kafkastore.protocol.membership.BrokerMembership.fence_if_lapsed`):
  a broker whose last successful heartbeat is older than the liveness window by its own
  monotonic clock (it was paused, or its store stalled) fences itself before the request is
  handled: every :meth:`~kafkastore.protocol.membership.BrokerMembership.on_fence` callback runs
  and coordinators drop what they loaded. The check runs here, on the request path, and not
  only in the heartbeat: a paused process's heartbeat thread resumes at the same moment as its
  request handlers.
* The shared documents its decisions read: ACLs, client quotas and SCRAM credentials are
  never older than their bound at decision time (:data:`MAX_DECISION_AGE_S`, or twice
  ``quota_refresh_s`` if longer, for quotas). One background refresher per document
  (:class:`kafkastore.cluster.refresher.Refresher`, :func:`start_refreshers`) starts reads
  often enough, overlapping when the store is slow, that the copies stay younger than the
  bound while the store answers; a request that still finds one older (after a pause, a
  store slower than the bound, reads that fail) waits for a fresh read and fails closed.
  SCRAM credentials are checked the same way at login
  (:meth:`kafkastore.cluster.scram.ScramUsers.lookup`).
"""
from __future__ import annotations

import asyncio
import threading
from collections import Counter

from ..cluster.refresher import Refresher
from ..errors import StorageError

#: The oldest ACLs, credentials and quotas a decision may use (seconds).
MAX_DECISION_AGE_S = 2.0

#: The longest a request waits for a fresh read of the ACLs or quotas before it is answered
#: with a retriable error (seconds; clients time requests out at 30 s).
FRESH_READ_WAIT_S = 5.0

_quota_read = threading.Lock()   # requests that find the quotas stale share one read
_in_flight: dict = {}            # (server, document) -> the read requests are waiting for
_waits: dict[int, Counter] = {}  # id(server) -> requests that waited for a read, per document


def quota_bound_s(server) -> float:
    """How old the quotas in hand may be when a request is decided."""
    return max(MAX_DECISION_AGE_S, 2 * server.options.quota_refresh_s)


def _quotas_stale(server) -> bool:
    read_at = server.quotas.read_at
    return read_at is not None and server.clock.monotonic_s() - read_at >= quota_bound_s(server)


def read_quotas(server) -> None:
    """Read the root's quotas now and apply them (one store request when unchanged).
    Blocking. Reads may overlap: the newest version and the latest read time win."""
    at = server.clock.monotonic_s()
    version, doc, _ = server.quota_document.read()
    server.quotas.apply(version, doc, at)


def start_refreshers(server, scram_users=None) -> list[Refresher]:
    """Start one background refresher per document this broker decides on: the ACLs (with
    ``--authorizer``), the client quotas, and the SCRAM credentials (``scram_users``, the
    broker's :class:`~kafkastore.cluster.scram.ScramUsers` when it takes SASL logins).
    Stop them with :func:`stop_refreshers`."""
    clock = server.clock
    out = []
    authorizer = server.authorizer
    if authorizer is not None:
        out.append(Refresher("acls", authorizer.load, authorizer.max_age_s, clock=clock))
    out.append(Refresher("quotas", lambda: read_quotas(server), quota_bound_s(server),
                         clock=clock))
    if scram_users is not None:
        out.append(Refresher("scram", scram_users.reload, scram_users.max_age_s, clock=clock))
    for refresher in out:
        refresher.start()
    return out


def stop_refreshers(refreshers) -> None:
    """Stop what :func:`start_refreshers` started."""
    for refresher in refreshers:
        refresher.stop()


def fresh_waits(server) -> Counter:
    """How many requests waited for a fresh read, per document ("ACLs", "quotas")."""
    return Counter(_waits.get(id(server), ()))


def due(server) -> bool:
    """Whether :func:`before_serving` has anything to do (cheap, no I/O: asked before every
    request)."""
    registry = server.brokers
    if registry is not None and registry.lease_lapsed():
        return True
    authorizer = server.authorizer
    if authorizer is not None and authorizer.stale():
        return True
    return _quotas_stale(server)


async def before_serving(server, *, decides: bool = True) -> None:
    """Fence a broker whose lease lapsed, and make the ACLs and quotas in hand fresh, before
    the request is decided. ``decides=False``: a request that reads neither (ApiVersions,
    the SASL exchange) only fences, and is answered even while the store is failing."""
    registry = server.brokers
    if registry is not None:
        registry.fence_if_lapsed()
    if not decides:
        return
    authorizer = server.authorizer
    if authorizer is not None and authorizer.stale():
        _waits.setdefault(id(server), Counter())["ACLs"] += 1
        await _fresh(server, "ACLs", authorizer.load_if_stale)
    if _quotas_stale(server):
        _waits.setdefault(id(server), Counter())["quotas"] += 1
        await _fresh(server, "quotas", refresh_quotas_if_stale, server)


async def _fresh(server, what: str, read, *args) -> None:
    """Run the blocking ``read`` of a shared document once for every request that needs it
    meanwhile (one I/O thread, however many requests wait), and wait at most
    :data:`FRESH_READ_WAIT_S`: a store slower than that gets the request a StorageError
    (answered with a retriable code) rather than a wait longer than the client's own
    timeout, and no pile of blocked I/O threads."""
    key = (id(server), what)
    pending = _in_flight.get(key)
    if pending is None:
        pending = asyncio.ensure_future(server.read_document(read, *args))
        _in_flight[key] = pending
        pending.add_done_callback(lambda f: _settled(key, f))
    try:
        await asyncio.wait_for(asyncio.shield(pending), FRESH_READ_WAIT_S)
    except asyncio.TimeoutError:
        raise StorageError(f"the {what} could not be read within {FRESH_READ_WAIT_S:g} s; "
                           "retry") from None


def _settled(key, fut: asyncio.Future) -> None:
    if _in_flight.get(key) is fut:
        del _in_flight[key]
    if not fut.cancelled():
        fut.exception()   # retrieved: each waiter gets it through the shield


def refresh_quotas_if_stale(server) -> None:
    """Re-read the quotas document unless another request did meanwhile, and apply it.
    Blocking (the I/O pool)."""
    with _quota_read:
        if not _quotas_stale(server):
            return
        read_quotas(server)
