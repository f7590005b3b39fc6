"""A Confluent-compatible schema registry stored in the root's ``_schemas`` topic.

:class:`SchemaRegistryThread` serves the REST API (``kafkastore serve
--schema-registry-listen``); :class:`~.store.SchemaStore` and
:class:`~.service.SchemaRegistryService` are the storage and the API without HTTP.
"""
from __future__ import annotations

from .http import SchemaRegistryThread
from .service import SchemaRegistryService
from .store import SCHEMAS_TOPIC, SchemaStore

__all__ = ["SCHEMAS_TOPIC", "SchemaRegistryService", "SchemaRegistryThread", "SchemaStore"]
