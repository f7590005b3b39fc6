"""What a broker checks before it serves a request (docs/DESIGN.md, "Fencing model").

* Its authority lease (:meth:`~kafkastore.protocol.membership.BrokerMembership.fence_if_lapsed`):
  a broker whose last successful heartbeat is older than the liveness window by its own
  monotonic clock (it was paused, or its store stalled) fences itself before the request is
  handled: every :meth:`~kafkastore.protocol.membership.BrokerMembership.on_fence` callback runs
  and coordinators drop what they loaded. The check runs here, on the request path, and not
  only in the heartbeat: a paused process's heartbeat thread resumes at the same moment as its
  request handlers.
* The shared documents its decisions read: ACLs and client quotas are never older than their
  bound at decision time (:data:`MAX_DECISION_AGE_S`, or twice ``quota_refresh_s`` if longer).
  The background refresh keeps them warm; a request that finds them older (after an idle
  spell, a pause, a slow store) waits for a fresh read. SCRAM credentials are checked the
  same way at login (:meth:`kafkastore.scram_users.ScramUsers.lookup`).
"""
from __future__ import annotations

import asyncio
import threading

from ..errors import StorageError

#: The oldest ACLs, credentials and quotas a decision may use (seconds).
MAX_DECISION_AGE_S = 2.0

#: The longest a request waits for a fresh read of the ACLs or quotas before it is answered
#: with a retriable error (seconds; clients time requests out at 30 s).
FRESH_READ_WAIT_S = 5.0

_quota_read = threading.Lock()   # requests that find the quotas stale share one read
_in_flight: dict = {}            # (server, document) -> the read requests are waiting for


def quota_bound_s(server) -> float:
    """How old the quotas in hand may be when a request is decided."""
    return max(MAX_DECISION_AGE_S, 2 * server.options.quota_refresh_s)


def _quotas_stale(server) -> bool:
    document = server.quota_document
    age = None if document is None else document.age_s()
    return age is not None and age >= quota_bound_s(server)


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
        await _fresh(server, "ACLs", authorizer.load_if_stale)
    if _quotas_stale(server):
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
        # Applied whatever the version: the background refresh may have read this version
        # but not applied it yet.
        server.quotas.set_config(server.quota_document.refresh())
