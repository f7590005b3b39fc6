"""What a broker checks before it serves a request (docs/DESIGN.md, "Fencing model").

* Its authority lease (:meth:`~kafkastore.protocol.brokers.BrokerRegistry.fence_if_lapsed`):
  a broker whose last successful heartbeat is older than the liveness window by its own
  monotonic clock (it was paused, or its store stalled) fences itself before the request is
  handled: every :meth:`~kafkastore.protocol.brokers.BrokerRegistry.on_fence` callback runs
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

import threading

#: The oldest ACLs, credentials and quotas a decision may use (seconds).
MAX_DECISION_AGE_S = 2.0

_quota_read = threading.Lock()   # requests that find the quotas stale share one read


def quota_bound_s(server) -> float:
    """How old the quotas in hand may be when a request is decided."""
    return max(MAX_DECISION_AGE_S, 2 * server.options.quota_refresh_s)


def _quotas_stale(server) -> bool:
    document = getattr(server, "quota_document", None)
    age = None if document is None else document.age_s()
    return age is not None and age >= quota_bound_s(server)


def due(server) -> bool:
    """Whether :func:`before_serving` has anything to do (cheap, no I/O: asked before every
    request)."""
    registry = getattr(server, "brokers", None)
    if registry is not None and registry.lease_lapsed():
        return True
    authorizer = getattr(server, "authorizer", None)
    if authorizer is not None and authorizer.stale():
        return True
    return _quotas_stale(server)


async def before_serving(server) -> None:
    """Fence a broker whose lease lapsed, and make the ACLs and quotas in hand fresh, before
    the request is decided."""
    registry = getattr(server, "brokers", None)
    if registry is not None:
        registry.fence_if_lapsed()
    authorizer = getattr(server, "authorizer", None)
    if authorizer is not None and authorizer.stale():
        await server.fresh_acls()
    if _quotas_stale(server):
        await server.run(refresh_quotas_if_stale, server)


def refresh_quotas_if_stale(server) -> None:
    """Re-read the quotas document unless another request did meanwhile, and apply it.
    Blocking (the I/O pool)."""
    with _quota_read:
        if not _quotas_stale(server):
            return
        # Applied whatever the version: the background refresh may have read this version
        # but not applied it yet.
        server.quotas.set_config(server.quota_document.refresh())
