"""Protobuf schemas given as ``.proto`` text (a registry that ignores
``?format=serialized``), parsed into a FileDescriptorProto."""
from __future__ import annotations

from .type_mapping import UnmappableSchema


def parse_proto(text: str, name: str):
    """The FileDescriptorProto of ``.proto`` source ``text`` (not supported yet: the
    registry must return the serialized descriptor)."""
    raise UnmappableSchema("the registry returned .proto text, which loads do not parse yet; "
                           "use a registry that serves ?format=serialized")
