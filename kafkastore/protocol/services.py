"""The services one broker's API families create and share, typed: ``server.services``.

The group and transaction services start on first use (on the event loop); the SCRAM
secret and the ``--sasl-credentials`` keys are computed once per broker. Handlers reach
them through ``ctx.broker.services`` instead of private attributes set on the server.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Coroutine

if TYPE_CHECKING:  # annotations only: the services' modules import the whole protocol
    from ..cluster.scram import ScramUsers
    from .coordinators.group_service import GroupService
    from .apis.txn import TxnService


@dataclass
class BrokerServices:
    """What a :class:`~kafkastore.protocol.server.BrokerServer` holds for its API families."""

    #: Starts a background task the broker cancels when it stops.
    spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Future]
    #: The group coordinator of this broker (``apis.groups.service``).
    group_service: GroupService | None = None
    #: The transaction coordinator of this broker (``apis.txn.service``).
    txn_service: TxnService | None = None
    #: Groups this broker coordinates that took offsets in a transaction
    #: (``apis.txn.transactional_groups``).
    txn_groups: set[str] = field(default_factory=set)
    #: The root's SCRAM secret (fake salts for unknown users), read once.
    scram_secret: bytes | None = None
    #: ``--sasl-credentials`` users' SCRAM keys by (user, mechanism, salt, iterations).
    scram_file_keys: dict = field(default_factory=dict)
    #: The root's SCRAM users as this broker sees them (``apis.users.scram_users``: made on
    #: first use, shared by SASL, the user APIs and the metrics listener's basic auth).
    scram_users: ScramUsers | None = None
