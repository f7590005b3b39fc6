"""The one ordered list of the API families a broker serves.

Each family module holds its handlers and a ``register(table)`` that registers its keys
once each (:class:`~kafkastore.protocol.handler_table.HandlerTable` refuses a second
registration). The order is the order of registration; no family replaces another's key.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .apis import (acls as api_acls, admin as api_admin, cluster as api_cluster,
                   configs as api_configs, groups as api_groups, legacy as api_legacy,
                   meta as api_meta, produce as api_produce, client_quotas as api_quotas,
                   txn as api_txn, users as api_users, sasl)
from .handler_table import HandlerTable

#: Every family, in registration order. ``apis.legacy`` registers Fetch and ListOffsets at
#: every version (its own handlers below the first version kio has, ``apis.fetch``'s above).
FAMILIES = (api_meta, api_produce, api_legacy, api_admin, api_configs, api_cluster, api_users,
            api_groups, api_txn, api_quotas, api_acls)
#: Served only when clients must authenticate with SASL.
SASL_FAMILY = sasl


def register_families(table: HandlerTable, *, sasl_enabled: bool,
                      extensions: Iterable[Callable[[HandlerTable], None]] = ()) -> None:
    """Register every family in ``FAMILIES`` order, SASL's when on, then ``extensions``
    (hooks of tests and embedders, which add keys and may not replace one)."""
    for family in FAMILIES:
        family.register(table)
    if sasl_enabled:
        SASL_FAMILY.register(table)
    for extension in extensions:
        extension(table)
