"""One client connection of the broker: reading request frames, handling them, writing the
answers in request order, and what a connection may hold.

A :class:`Connection` reads int32-sized frames, decodes each with
:mod:`kafkastore.protocol.wire.codec`, starts the handler the server's
:class:`~kafkastore.protocol.handler_table.HandlerTable` names for its key and version, and writes
the responses in request order (one ``write`` each, whole or not at all). Requests of one
connection are handled concurrently (clients pipeline up to ``max.in.flight``), at most
:data:`MAX_IN_FLIGHT` at a time and with their bytes under ``max_request_bytes``.

Client quotas are enforced here, per connection, as Kafka's channel throttling: a request
over a quota is answered with its throttle time and nothing more is read from the
connection until it is over (a client older than KIP-219 also gets the answer held back).
A request's own time (on the loop and in the I/O pool: :func:`current_request_time`)
counts towards the request-time quota.

Until it authenticates (SASL) a connection holds a :class:`PreAuthSlot` of the server's
:class:`PreAuthBudget`: at most 512 KB per request, and closed at its deadline.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import logging
import time
from typing import TYPE_CHECKING

from ..errors import StorageError
from . import fencing, listeners
from .quotas import ANONYMOUS, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from .handler_table import RequestContext
from .wire import codec, error_responses
from .wire.api_keys import (API_VERSIONS, FETCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE,
                            client_throttles, quota_exempt)

if TYPE_CHECKING:  # annotations only: the server imports this module
    from .server import BrokerServer

log = logging.getLogger("kafkastore.serve")

#: Largest request before SASL authentication (Kafka's sasl.server.max.receive.size).
MAX_UNAUTHENTICATED_REQUEST_BYTES = 512 * 1024
MAX_IN_FLIGHT = 100  # requests of one connection being handled or waiting to be answered


class PreAuthBudget:
    """The server's unauthenticated connections (TLS handshakes included): how many in all
    and per address, and their slots in accept order (the oldest are evicted first)."""

    def __init__(self):
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.slots: dict[PreAuthSlot, None] = {}

    def held_by(self, ip: str) -> int:
        """Unauthenticated connections of one address."""
        return self.per_ip.get(ip, 0)

    def take(self, ip: str, writer: asyncio.StreamWriter) -> PreAuthSlot:
        """A slot for a new connection from ``ip`` (released when it authenticates or closes)."""
        return PreAuthSlot(self, ip, writer)

    def evict_for(self, ip: str) -> None:
        """The unauthenticated budget is full: close the oldest unauthenticated connection of
        the address holding the most of it, if ``ip`` holds fewer (so addresses that filled the
        budget cannot keep a new one out; they can only take turns with each other)."""
        if not self.per_ip:
            return
        top = max(self.per_ip, key=self.per_ip.get)
        if self.per_ip.get(ip, 0) + 1 >= self.per_ip[top]:
            return
        for slot in self.slots:
            if slot.ip == top and slot.held:
                log.info("closing %s: unauthenticated budget full, making room for %s", slot.peer, ip)
                slot.release()
                if slot.writer.transport is not None:
                    slot.writer.transport.abort()
                return


class PreAuthSlot:
    """A connection's place in the unauthenticated budget, released once (when it authenticates
    or closes)."""

    def __init__(self, budget: PreAuthBudget, ip: str, writer: asyncio.StreamWriter):
        self.budget, self.ip, self.writer, self.held = budget, ip, writer, True
        self.peer = writer.get_extra_info("peername")
        budget.slots[self] = None
        budget.total += 1
        budget.per_ip[ip] = budget.per_ip.get(ip, 0) + 1

    def release(self) -> None:
        """Leave the budget (a second call does nothing)."""
        if not self.held:
            return
        self.held = False
        budget = self.budget
        budget.slots.pop(self, None)
        budget.total -= 1
        left = budget.per_ip.get(self.ip, 1) - 1
        if left > 0:
            budget.per_ip[self.ip] = left
        else:
            budget.per_ip.pop(self.ip, None)


def close_quietly(writer: asyncio.StreamWriter) -> None:
    """Close a writer unless its transport is already gone."""
    if writer.transport is not None:
        writer.close()


def pre_auth_expired(slot: PreAuthSlot, writer: asyncio.StreamWriter, peer) -> None:
    """Close a connection still unauthenticated at its deadline, whatever it sends meanwhile."""
    if slot.held:
        log.info("closing %s: not authenticated in time", peer)
        transport = writer.transport
        if transport is not None:
            transport.abort()


class Connection:
    """One client connection: reads requests, answers them in order."""

    def __init__(self, server: BrokerServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, pre_auth: PreAuthSlot | None = None):
        self.server = server
        self._pre_auth = pre_auth
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.principal: str | None = None
        self.sasl_state: dict = {}
        # SASL required: until authenticated only ApiVersions / SaslHandshake / SaslAuthenticate.
        self._authenticated = False
        self.authenticated = not listeners.sasl_enabled(server.options.sasl,
                                                        server.options.credentials)
        self.negotiated: dict[int, int] = {}
        self.close_after_response = False
        # Produce requests of this connection queue their batches in arrival order (api_produce).
        self.produce_gate: asyncio.Future | None = None
        self._inflight_bytes = 0  # request bytes read and not yet answered
        self._drained = asyncio.Event()
        #: Loop time until which no request is read: a throttled client's channel is muted.
        self.muted_until = 0.0
        self._mute_gate = asyncio.Lock()
        #: The broker's fence epoch when the connection opened: a request read after the
        #: broker fenced itself is not handled (see :meth:`_opened_before_a_fence`).
        registry = server.brokers
        self.fence_epoch = registry.fence_epoch if registry is not None else 0
        if registry is not None and registry.lease_lapsed():
            # Accepted from the backlog as the process resumes: the client may have connected
            # and sent its request during the pause. Fencing now leaves the connection behind.
            registry.fence_if_lapsed()

    @property
    def authenticated(self) -> bool:
        """Whether the client may send any request (SASL done, or no SASL on this listener)."""
        return self._authenticated

    @authenticated.setter
    def authenticated(self, value: bool) -> None:
        self._authenticated = value
        if value and self._pre_auth is not None:
            self._pre_auth.release()   # out of the unauthenticated budget and deadline

    def _max_request_bytes(self) -> int:
        """512 KB before SASL authentication (as Kafka), the listener's limit after."""
        limit = self.server.options.max_request_bytes
        return limit if self.authenticated else min(limit, MAX_UNAUTHENTICATED_REQUEST_BYTES)

    async def _read(self, n: int, idle_s: float) -> bytes | None:
        """``n`` bytes, or None when the client closed or sent nothing for ``idle_s`` while no
        request of it was being handled (Kafka's connections.max.idle.ms)."""
        while True:
            try:
                return await asyncio.wait_for(self.reader.readexactly(n), idle_s)
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            except asyncio.TimeoutError:
                # A cancelled readexactly leaves what arrived in the buffer, so waiting on is
                # safe. Requests being handled (a long poll) keep the connection open.
                if self._inflight_bytes == 0:
                    log.info("closing %s: nothing received for %.0f s", self.peer, idle_s)
                    return None

    async def run(self) -> None:
        # Bounded: a client that pipelines without reading its responses stops being read, and
        # the bytes of its requests being handled stay under one request limit (memory per
        # connection: about two requests' worth, whatever the client sends).
        queue: asyncio.Queue = asyncio.Queue(maxsize=MAX_IN_FLIGHT)
        writer_task = asyncio.ensure_future(self._write_responses(queue))
        idle_s = self.server.options.connections_max_idle_ms / 1000
        try:
            loop = asyncio.get_running_loop()
            while True:
                wait = self.muted_until - loop.time()
                if wait > 0:  # throttled: read nothing more until the throttle time is over
                    await asyncio.sleep(wait)
                size_bytes = await self._read(4, idle_s)
                if size_bytes is None:
                    return
                size = int.from_bytes(size_bytes, "big", signed=True)
                limit = self._max_request_bytes()
                if size < 8 or size > limit:
                    log.warning("closing %s: request size %d outside [8, %d]%s", self.peer, size, limit,
                                "" if self.authenticated else " before authentication")
                    return
                while self._inflight_bytes and self._inflight_bytes + size > \
                        self.server.options.max_request_bytes:
                    self._drained.clear()
                    await self._drained.wait()
                    if writer_task.done():
                        return
                payload = await self._read(size, idle_s)
                if payload is None:
                    return
                task = self._dispatch(payload)
                if task is None:
                    return
                self._inflight_bytes += size
                self.server.note_connection_bytes(self._inflight_bytes)
                await queue.put((task, size))
                if writer_task.done():
                    return
        finally:
            if not writer_task.done():
                try:
                    queue.put_nowait(None)
                except asyncio.QueueFull:
                    writer_task.cancel()
            try:
                await writer_task
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the connection is over
                pass

    def _opened_before_a_fence(self) -> bool:
        """Whether the broker fenced itself since this connection opened (fencing it now if
        its lease lapsed). Such a connection is closed and its request not handled: a broker
        paused past the liveness window reads, when it resumes, requests its clients sent
        before the pause and may since have given up on (a TxnOffsetCommit whose client timed
        out and aborted its transaction would otherwise join the producer's next transaction
        and commit its offsets without its outputs). Clients reconnect and resend what they
        still want."""
        registry = self.server.brokers
        if registry is None:
            return False
        if registry.lease_lapsed():
            registry.fence_if_lapsed()
        return registry.fence_epoch != self.fence_epoch

    def _dispatch(self, payload: bytes):
        """Decode one request and start its handler; None closes the connection."""
        if self._opened_before_a_fence():
            log.warning("closing %s: the broker fenced itself since the connection opened "
                        "(its requests may have waited out a pause); the client reconnects",
                        self.peer)
            return None
        try:
            head = codec.peek_header(payload)
        except codec.ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            return None
        registry = self.server.registry
        spec = registry.lookup(head.api_key, head.api_version)
        if spec is None:
            if head.api_key == API_VERSIONS:
                # lazy: the API families import the whole protocol; importing the server (and
                # so this module) must not
                from .apis.meta import unsupported_api_versions
                return asyncio.ensure_future(_ready(
                    unsupported_api_versions(registry, head.correlation_id)))
            log.warning("closing %s: unsupported API key %d version %d", self.peer, head.api_key,
                        head.api_version)
            return None
        if not self.authenticated and head.api_key not in (API_VERSIONS, SASL_HANDSHAKE,
                                                           SASL_AUTHENTICATE):
            log.warning("closing %s: API %d before SASL authentication", self.peer, head.api_key)
            return None
        try:
            header, pos = codec.parse_header(payload, codec.is_flexible(head.api_key, head.api_version))
            request = codec.decode_request(head.api_key, head.api_version, payload, pos)
        except codec.ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            return None
        if self.negotiated.get(head.api_key) != head.api_version:
            self.negotiated[head.api_key] = head.api_version
            log.info("client %r at %s uses API %d version %d", header.client_id, self.peer,
                     head.api_key, head.api_version)
        ctx = RequestContext(self.server, header.api_key, header.api_version,
                             header.correlation_id, header.client_id, principal=self.principal,
                             connection=self)
        return asyncio.ensure_future(self._handle(spec.handler, ctx, request, len(payload)))

    async def _handle(self, handler, ctx: RequestContext, request, size: int) -> bytes | None:
        gate = self._mute_gate
        if gate.locked() or self.muted_until > asyncio.get_running_loop().time():
            # Read before the channel was muted (clients pipeline): handled once the mute is
            # over, one at a time and in arrival order (the lock is FIFO; produce batches keep
            # their order), each seeing the mute the one before it set, as if read then:
            # Kafka reads nothing from a muted channel and one request of a connection at a time.
            async with gate:
                wait = self.muted_until - asyncio.get_running_loop().time()
                if wait > 0:
                    await asyncio.sleep(wait)
                return await self._handle_now(handler, ctx, request, size)
        return await self._handle_now(handler, ctx, request, size)

    async def _handle_now(self, handler, ctx: RequestContext, request, size: int) -> bytes | None:
        server = self.server
        quotas, metrics = server.quotas, server.metrics
        started = time.perf_counter()
        acc = None
        try:
            if fencing.due(server):   # a lapsed lease fences; ACLs and quotas never older than the bound
                await fencing.before_serving(server, decides=not quota_exempt(ctx.api_key))
            if quotas.active and ctx.api_key == FETCH:
                request = self._cap_fetch(ctx, request)
            if quotas.active and not quota_exempt(ctx.api_key):  # ApiVersions and SASL never wait
                acc = _RequestTime(asyncio.current_task())
                _REQUEST_TIME.set(acc)  # this task's own context: ``server.run`` adds pool time
                response = await _StepTimer(handler(ctx, request), acc)
            else:
                response = await handler(ctx, request)
        except StorageError as exc:
            response = self._store_failed(ctx, request, exc)
        data = None if response is None else codec.encode_response(ctx.correlation_id, response)
        throttle_s = 0.0
        if quotas.active:
            throttle_s = self._quota_throttle(ctx, request, size, data, acc)
            if throttle_s > 0 and response is not None:
                if ctx.api_key == FETCH:
                    # Kafka answers a throttled fetch empty (its bytes were unrecorded): the
                    # client fetches the same offsets again once the throttle time is over.
                    response = dataclasses.replace(response, responses=())
                response = _with_throttle(response, throttle_s)
                data = codec.encode_response(ctx.correlation_id, response)
        if metrics is not None:
            metrics.observe_request(ctx.api_key, ctx.api_version, time.perf_counter() - started,
                                    request, response)
        if throttle_s > 0:
            # Kafka's channel throttling: nothing more is read from the client for the
            # throttle time; a client too old to wait by itself (before KIP-219) also gets
            # this response held back that long.
            loop = asyncio.get_running_loop()
            self.muted_until = max(self.muted_until, loop.time() + throttle_s)
            if not client_throttles(ctx.api_key, ctx.api_version):  # before KIP-219
                await asyncio.sleep(throttle_s)
        return data

    def _store_failed(self, ctx: RequestContext, request, exc: StorageError):
        """The answer to a request the store failed under (its ACLs or quotas could not be
        made fresh, or its handler let the failure through): the request's own response
        with a retriable code in every entry, as Kafka answers, on a connection that stays.
        A produce with acks=0 expects no answer: its connection closes (Kafka's way to tell
        such a producer), by raising."""
        if ctx.api_key == PRODUCE and getattr(request, "acks", -1) == 0:
            raise exc
        log.warning("API %d v%d from %s: the store failed: %s", ctx.api_key, ctx.api_version,
                    self.peer, exc)
        return error_responses.error_response(ctx.api_key, ctx.api_version, request,
                                              error_responses.storage_error_code(ctx.api_key),
                                              str(exc))

    def _cap_fetch(self, ctx: RequestContext, request):
        """``request`` with its ``max_bytes`` at most what the consumer byte-rate quota allows
        over the measured span (Kafka's ``getMaxValueInQuotaWindow``): a bigger response
        would be throttled, answered empty and asked for again, forever."""
        match = self.server.quotas.config.lookup(CONSUMER_BYTE_RATE, self.principal or ANONYMOUS,
                                                 ctx.client_id or "")
        if match is None or getattr(request, "max_bytes", None) is None:
            return request
        opts = self.server.options
        cap = max(int(match.bound * (opts.quota_samples - 1) * opts.quota_window_s), 1)
        return dataclasses.replace(request, max_bytes=cap) if request.max_bytes > cap else request

    def _quota_throttle(self, ctx: RequestContext, request, size: int, data: bytes | None,
                        acc: "_RequestTime | None") -> float:
        """Record this request against the client's quotas; the longest throttle (seconds)."""
        quotas, metrics = self.server.quotas, self.server.metrics
        user, client_id = self.principal or ANONYMOUS, ctx.client_id or ""
        now = self.server.clock.monotonic_s()
        recorded = []
        if ctx.api_key == PRODUCE:
            # Kafka records the request's size against the producer byte rate.
            recorded.append((PRODUCER_BYTE_RATE, size))
        elif ctx.api_key == FETCH and data is not None:
            recorded.append((CONSUMER_BYTE_RATE, len(data)))
        if acc is not None and not (ctx.api_key == PRODUCE and getattr(request, "acks", -1) == 0):
            # Percent of one thread: busy seconds * 100 per second of the window.
            recorded.append((REQUEST_PERCENTAGE, acc.busy * 100))
        longest = 0.0
        for key, value in recorded:
            throttle, match = quotas.record(key, user, client_id, value, now)
            if throttle > 0:
                longest = max(longest, throttle)
                if metrics is not None:
                    metrics.observe_throttle(key, match, user, client_id, throttle)
        if longest > 0 and ctx.api_key == FETCH and data is not None:
            # The response goes out empty, so its bytes were not consumed (Kafka unrecords them).
            quotas.record(CONSUMER_BYTE_RATE, user, client_id, -len(data), now)
        return longest

    async def _write_responses(self, queue: asyncio.Queue) -> None:
        try:
            await self._write_loop(queue)
        finally:
            self._drained.set()  # the reader must not wait for a writer that is gone

    async def _write_loop(self, queue: asyncio.Queue) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            task, size = item
            try:
                data = await task
            except Exception:  # noqa: BLE001 - a handler bug closes this connection only
                log.exception("handler failed for %s; closing the connection", self.peer)
                self.writer.close()
                return
            finally:
                self._inflight_bytes -= size
                self._drained.set()
            if data is None:
                continue
            try:
                self.writer.write(data)
                await self.writer.drain()
            except (ConnectionError, RuntimeError):
                return
            if self.close_after_response:
                self.writer.close()
                return


async def _ready(value):
    return value


class _RequestTime:
    """Time one request's handler kept the event loop or a pool thread busy (seconds)."""

    __slots__ = ("task", "busy")

    def __init__(self, task):
        self.task = task
        self.busy = 0.0


_REQUEST_TIME: contextvars.ContextVar[_RequestTime | None] = contextvars.ContextVar(
    "kafkastore_request_time", default=None)


def current_request_time() -> _RequestTime | None:
    """The time account of the request whose handler is running in this task (its ``busy``
    seconds count towards the request-time quota), None outside a quota-checked handler or
    in a task the handler started."""
    acc = _REQUEST_TIME.get()
    if acc is None or acc.task is not asyncio.current_task():
        return None
    return acc


class _StepTimer:
    """Awaits a coroutine, adding the time each of its steps runs on the loop to ``acc.busy``:
    a handler's own time, without the time it waits (a long poll costs nothing)."""

    __slots__ = ("coro", "acc")

    def __init__(self, coro, acc: _RequestTime):
        self.coro, self.acc = coro, acc

    def __await__(self):
        coro, acc = self.coro, self.acc
        value, error = None, None
        while True:
            started = time.perf_counter()
            try:
                future = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                acc.busy += time.perf_counter() - started
                return stop.value
            except BaseException:
                acc.busy += time.perf_counter() - started
                raise
            acc.busy += time.perf_counter() - started
            value, error = None, None
            try:
                value = yield future
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the handler, as await would
                error = exc


def _with_throttle(response, throttle_s: float):
    """``response`` with its ``throttle_time_ms`` raised to ``throttle_s`` (if it has one)."""
    current = getattr(response, "throttle_time", None)
    if current is None:
        return response
    wanted = datetime.timedelta(milliseconds=min(int(throttle_s * 1000 + 0.999), 2**31 - 1))
    if current >= wanted:
        return response
    return dataclasses.replace(response, throttle_time=wanted)

