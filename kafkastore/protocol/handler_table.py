"""The handler table: which API keys and versions the broker serves, and who serves them.

ApiVersions answers from this table, so it always tells the truth: an API
is advertised exactly when a handler is registered for it, at exactly the
registered version range. Each key is registered once (a second registration raises
:class:`~kafkastore.errors.DuplicateApiError`); a key whose old versions another function
serves is one registration of ``by_version(first_new, old, new)``.

Writing a handler (this is the contract for every API, the group APIs included)::

    from kafkastore.protocol.wire.codec import make
    from kafkastore.protocol.handler_table import RequestContext

    async def handle_heartbeat(ctx: RequestContext, request) -> object | None:
        # ``request`` is kio's dataclass for ctx.api_version, e.g.
        # kio.schema.heartbeat.v4.request.HeartbeatRequest.
        # Return kio's response dataclass of the same version; build it with
        # ``make(ctx.response_class, **fields)`` (extra fields of other
        # versions are dropped) and nested classes with
        # ``make(ctx.response_module, "NestedName", **fields)``.
        # Return None to send no response (only Produce with acks=0 does).
        return make(ctx.response_class, error_code=0)

    def register(table: HandlerTable) -> None:
        table.serve(HEARTBEAT, handle_heartbeat)   # at the versions of HEARTBEAT's row

The key is a row of :mod:`kafkastore.protocol.wire.api_keys` (the one table of keys, names and
versions: ``serve`` registers a key at its row's range, ``register`` at a range within it). :class:`~kafkastore.protocol.server.
BrokerServer` registers every API it serves through the one ordered list of API families,
``kafkastore.protocol.families.FAMILIES`` (with SASL on, ``sasl`` after them). A new API is a
row in ``api_keys`` and a handler with its ``register`` line in its family's module; a new
family module is one more entry in ``FAMILIES``. ``BrokerServer(storage, options,
extensions=[hook])`` (and ``BrokerThread`` / ``run_server``) also calls extra
``register(table)`` hooks after the families, for tests and embedders; they add keys,
never replace one. Handlers run on the
server's asyncio event loop: do storage I/O with ``await ctx.run(fn, *args)``
(the broker's thread pool), never blocking calls on the loop. ``ctx.broker``
is the :class:`kafkastore.protocol.server.BrokerServer` (its ``storage``,
``node_id``, ``live_brokers()``, ``appender``...). To map a key (a group id) to one
live broker the same way on every broker, use
``kafkastore.protocol.placement.leader_for(key, 0, ctx.broker.live_brokers())``.
``ctx.connection`` is the client's connection (``principal`` after SASL). Requests of one connection
are handled concurrently and answered in order; a handler that raises gets
the connection closed (and is logged), so map expected failures to Kafka
error codes in the response instead.

Every version range must be one kio has classes for (``codec.request_class``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..errors import ConfigError, DuplicateApiError
from .wire import codec
from .wire.api_keys import ApiKey
from .authorizer import principal_of


@dataclass
class RequestContext:
    """What a handler knows about the request it is answering."""

    broker: Any
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    principal: str | None = None
    connection: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def response_class(self) -> type:
        """kio's response class for this API key and version."""
        return codec.response_class(self.api_key, self.api_version)

    @property
    def response_module(self):
        """The module of this version's response classes (for nested classes)."""
        return codec.response_module(self.api_key, self.api_version)

    async def run(self, fn, *args):
        """Run a blocking function in the broker's thread pool."""
        return await self.broker.run(fn, *args)

    def authorize(self, operation, resource_type, name: str = "kafka-cluster") -> bool:
        """Whether this request's principal may do ``operation`` (:class:`kafkastore.cluster.acls.Operation`)
        on the resource: always, unless the broker runs with ``--authorizer``
        (:mod:`kafkastore.protocol.authorizer`). Never blocks."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        principal, host = principal_of(self.connection)
        return authorizer.authorize(principal, host, operation, resource_type, name)


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ApiSpec:
    """One registered API: key, inclusive version range, handler."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler


def by_version(first_new: int, old: Handler, new: Handler) -> Handler:
    """One handler for a key whose versions below ``first_new`` ``old`` serves and the rest
    ``new`` (Fetch and ListOffsets: the versions kio has no classes for, from :mod:`~.apis.legacy`).

    Not a coroutine itself: it returns the chosen handler's, so current versions pay one
    call and one comparison, not another coroutine frame. ``for_version(v)`` names the
    function serving version ``v``.
    """
    def handle(ctx: RequestContext, request):
        return (old if ctx.api_version < first_new else new)(ctx, request)

    handle.for_version = lambda version: old if version < first_new else new
    return handle


class HandlerTable:
    """api_key -> :class:`ApiSpec`, each key registered once."""

    def __init__(self):
        self._specs: dict[int, ApiSpec] = {}

    def serve(self, api_key: int, handler: Handler) -> None:
        """Serve ``api_key`` at the versions of its row in :mod:`~.wire.api_keys` (the one
        home of the ranges) with ``handler``."""
        row = ApiKey(api_key)
        self.register(api_key, row.min_version, row.max_version, handler)

    def register(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> None:
        """Serve ``api_key`` at versions ``[min_version, max_version]`` with ``handler``;
        :class:`DuplicateApiError` if the key is served already."""
        if api_key in self._specs:
            raise DuplicateApiError(f"API {api_key} is registered twice (each key once: old "
                                    f"and new versions by one handler, see by_version)")
        if not 0 <= min_version <= max_version:
            raise ConfigError(f"bad version range {min_version}..{max_version} for API {api_key}")
        for v in range(min_version, max_version + 1):
            try:
                codec.request_class(api_key, v)
                codec.response_class(api_key, v)
            except KeyError:
                raise ConfigError(f"no message classes for API {api_key} version {v}") from None
        self._specs[api_key] = ApiSpec(api_key, min_version, max_version, handler)

    def lookup(self, api_key: int, version: int) -> ApiSpec | None:
        """The spec serving this key at this version, else None."""
        spec = self._specs.get(api_key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            return None
        return spec

    def get(self, api_key: int) -> ApiSpec | None:
        """The spec of an API key at any version."""
        return self._specs.get(api_key)

    def api_versions(self) -> list[tuple[int, int, int]]:
        """``(api_key, min_version, max_version)`` of every registered API, by key."""
        return [(s.api_key, s.min_version, s.max_version) for _, s in sorted(self._specs.items())]
