"""Protobuf schemas given as ``.proto`` text (a registry that ignores
``?format=serialized``), compiled into a FileDescriptorProto by the built-in
registry's compiler (:func:`kafkastore.schema_registry.protobuf_schema.to_descriptor`)."""
from __future__ import annotations

from .type_mapping import UnmappableSchema


def parse_proto(text: str, name: str):
    """The FileDescriptorProto of ``.proto`` source ``text``, named ``name`` unless
    it has a name; UnmappableSchema if it does not compile."""
    from kafkastore.errors import KafkaStoreError  # lazy: protobuf start-up
    from kafkastore.schema_registry.protobuf_schema import to_descriptor  # lazy: protobuf start-up

    try:
        fdp = to_descriptor(text)
    except (KafkaStoreError, ValueError) as exc:
        raise UnmappableSchema(f".proto text does not compile: {exc}") from None
    if not fdp.name:
        fdp.name = name
    return fdp
