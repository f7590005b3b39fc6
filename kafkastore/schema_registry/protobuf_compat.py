"""Protobuf compatibility, after Confluent's ``ProtobufCompatibilityChecker``. Pure.

:func:`incompatibilities` compares an ``original`` and an ``update`` schema
(:class:`~kafkastore.schema_registry.protobuf_schema.ProtoFile`) and returns the incompatible
differences, named as Confluent names them:

- ``MESSAGE_REMOVED``: a message of the original is gone (a renamed message counts as removed;
  a changed package alone does not: messages are matched by their name inside the package);
- ``FIELD_KIND_CHANGED``: scalar / message-or-enum / map kind of a field number changed;
- ``FIELD_SCALAR_KIND_CHANGED``: a scalar changed outside its wire-compatible group
  (int32 uint32 int64 uint64 bool; sint32 sint64; fixed32 sfixed32; fixed64 sfixed64;
  string bytes);
- ``FIELD_NAMED_TYPE_CHANGED``: the message or enum type of a field changed;
- ``REQUIRED_FIELD_ADDED`` / ``REQUIRED_FIELD_REMOVED`` (proto2);
- ``FIELD_MOVED_TO_EXISTING_ONEOF``, ``MULTIPLE_FIELDS_MOVED_TO_ONEOF``.

Compatible (not reported): fields or messages added, fields removed, renamed fields, enum
constants added or removed, a single field moved into a new oneof, a scalar switching between
singular and repeated.
"""
from __future__ import annotations

from .protobuf_schema import ProtoFile, ProtoMessage

_GROUPS = ({"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"},
           {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}, {"string", "bytes"})


def _local(pf: ProtoFile, name: str) -> str:
    p = pf.package + "." if pf.package else ""
    return name[len(p):] if p and name.startswith(p) else name


def _scalar_compatible(a: str, b: str) -> bool:
    return a == b or any(a in g and b in g for g in _GROUPS)


def incompatibilities(original: ProtoFile, update: ProtoFile) -> list[str]:
    """The incompatible differences from ``original`` to ``update`` (empty: compatible)."""
    out: list[str] = []
    new_msgs = {_local(update, n): m for n, m in update.messages.items()}
    for name, old in original.messages.items():
        local = _local(original, name)
        new = new_msgs.get(local)
        if new is None:
            out.append(f"MESSAGE_REMOVED: {local}")
            continue
        out += _message(original, update, local, old, new)
    return out


def _named(pf: ProtoFile, name: str) -> str:
    return _local(pf, name)


def _message(opf: ProtoFile, npf: ProtoFile, local: str, old: ProtoMessage,
             new: ProtoMessage) -> list[str]:
    out = []
    old_oneofs = {f.oneof for f in old.fields.values() if f.oneof}
    moved: dict[str, int] = {}
    for num, of in old.fields.items():
        nf = new.fields.get(num)
        where = f"{local}.{of.name} (#{num})"
        if nf is None:
            if of.label == "required":
                out.append(f"REQUIRED_FIELD_REMOVED: {where}")
            continue
        if of.kind != nf.kind:
            out.append(f"FIELD_KIND_CHANGED: {where} {of.kind} -> {nf.kind}")
        elif of.kind == "scalar" and not _scalar_compatible(of.type, nf.type):
            out.append(f"FIELD_SCALAR_KIND_CHANGED: {where} {of.type} -> {nf.type}")
        elif of.kind == "named" and _named(opf, of.type) != _named(npf, nf.type):
            out.append(f"FIELD_NAMED_TYPE_CHANGED: {where} {of.type} -> {nf.type}")
        elif of.kind == "map" and of.type != nf.type:
            out.append(f"FIELD_KIND_CHANGED: {where} {of.type} -> {nf.type}")
        if (of.label == "required") != (nf.label == "required"):
            out.append(f"{'REQUIRED_FIELD_ADDED' if nf.label == 'required' else 'REQUIRED_FIELD_REMOVED'}: "
                       f"{where}")
        if of.oneof is None and nf.oneof is not None:
            if nf.oneof in old_oneofs:
                out.append(f"FIELD_MOVED_TO_EXISTING_ONEOF: {where} into {nf.oneof}")
            else:
                moved[nf.oneof] = moved.get(nf.oneof, 0) + 1
    for oneof, n in moved.items():
        if n > 1:
            out.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF: {n} fields of {local} into {oneof}")
    for num, nf in new.fields.items():
        if num not in old.fields and nf.label == "required":
            out.append(f"REQUIRED_FIELD_ADDED: {local}.{nf.name} (#{num})")
    return out
