"""Protobuf schemas as the registry sees them: ``.proto`` text (most clients) or a base64
``FileDescriptorProto`` (confluent-kafka's Python serializer), both read into one small model
(:class:`ProtoFile`) that :mod:`~kafkastore.schema_registry.protobuf_compat` compares. Pure.

Type names are resolved to full names with protobuf's scoping rules; a name defined in an
imported file (not part of this schema's text) keeps its written name.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from ..errors import SchemaRegistryError

SCALARS = frozenset({"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
                     "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"})


@dataclass(frozen=True)
class ProtoField:
    """One field: ``kind`` is ``scalar``, ``named`` (a message or enum) or ``map``."""

    name: str
    number: int
    kind: str
    type: str
    label: str = ""          # "", "optional", "required" or "repeated"
    oneof: str | None = None


@dataclass
class ProtoMessage:
    """A message by its full name (package included); ``fields`` by number."""

    name: str
    fields: dict[int, ProtoField] = field(default_factory=dict)


@dataclass
class ProtoFile:
    """What the compatibility rules look at in one ``.proto`` file."""

    package: str = ""
    syntax: str = "proto2"
    messages: dict[str, ProtoMessage] = field(default_factory=dict)
    enums: dict[str, tuple[str, ...]] = field(default_factory=dict)
    imports: tuple[str, ...] = ()


def _invalid(msg: str) -> SchemaRegistryError:
    return SchemaRegistryError(422, 42201, f"Invalid schema: {msg}")


def decode_descriptor(schema: str):
    """The ``FileDescriptorProto`` of a base64 schema, or None if ``schema`` is not base64."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    text = schema.strip()
    if not text or any(c.isspace() for c in text) or ";" in text or "{" in text:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    fd = descriptor_pb2.FileDescriptorProto()
    try:
        fd.ParseFromString(raw)
    except DecodeError as exc:
        raise _invalid(f"base64 is not a FileDescriptorProto: {exc}") from None
    return fd


def parse(schema: str) -> ProtoFile:
    """Read ``.proto`` text or a base64 ``FileDescriptorProto``; :class:`SchemaRegistryError`
    42201 when it is neither."""
    fd = decode_descriptor(schema)
    if fd is not None:
        return from_descriptor(fd)
    return from_text(schema)


# -- text --------------------------------------------------------------------------------------
def from_text(text: str) -> ProtoFile:
    """Parse ``.proto`` text with proto-schema-parser."""
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    from antlr4.error.ErrorListener import ErrorListener

    class _Raise(ErrorListener):
        """ANTLR recovers from syntax errors (printing them); a schema must not."""

        def syntaxError(self, recognizer, offending, line, column, msg, e):  # noqa: N802
            raise _invalid(f"line {line}:{column}: {msg}")

    def strict(target):
        target.removeErrorListeners()
        target.addErrorListener(_Raise())

    try:
        tree = Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except SchemaRegistryError:
        raise
    except Exception as exc:  # noqa: BLE001 - the parser raises assorted errors on bad text
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise _invalid(f"cannot parse .proto text: {first}") from None
    out = ProtoFile(syntax=tree.syntax or "proto2")
    imports = []
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            out.package = el.name
        elif isinstance(el, ast.Import):
            imports.append(el.name)
    out.imports = tuple(imports)
    prefix = out.package + "." if out.package else ""
    raw: list[tuple[str, object]] = []   # (full name, ast.Message), every level

    def walk(elements, scope: str):
        for el in elements:
            if isinstance(el, ast.Message):
                name = scope + el.name
                raw.append((name, el))
                out.messages[name] = ProtoMessage(name)
                walk(el.elements, name + ".")
            elif isinstance(el, ast.Enum):
                out.enums[scope + el.name] = tuple(v.name for v in el.elements
                                                   if isinstance(v, ast.EnumValue))

    walk(tree.file_elements, prefix)
    for name, msg in raw:
        fields = out.messages[name].fields

        def add(f, oneof=None):
            if isinstance(f, ast.MapField):
                fields[f.number] = ProtoField(f.name, f.number, "map",
                                              f"map<{f.key_type},{_text_type(out, name, f.value_type)}>")
                return
            label = f.cardinality.value.lower() if f.cardinality is not None else ""
            if f.type in SCALARS:
                fields[f.number] = ProtoField(f.name, f.number, "scalar", f.type, label, oneof)
            else:
                fields[f.number] = ProtoField(f.name, f.number, "named", _resolve(out, name, f.type),
                                              label, oneof)

        for el in msg.elements:
            if isinstance(el, (ast.Field, ast.MapField)):
                add(el)
            elif isinstance(el, ast.OneOf):
                for f in el.elements:
                    if isinstance(f, ast.Field):
                        add(f, el.name)
    return out


def _text_type(pf: ProtoFile, scope: str, name: str) -> str:
    return name if name in SCALARS else _resolve(pf, scope, name)


def _resolve(pf: ProtoFile, scope: str, name: str) -> str:
    """Protobuf scoping: innermost scope outwards; a leading dot is absolute."""
    if name.startswith("."):
        return name[1:]
    parts = scope.split(".")
    while True:
        cand = ".".join(parts + [name]) if parts else name
        if cand in pf.messages or cand in pf.enums:
            return cand
        if not parts:
            return name  # from an import: kept as written
        parts.pop()


# -- descriptor --------------------------------------------------------------------------------
_TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
               7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32",
               16: "sfixed64", 17: "sint32", 18: "sint64"}
_LABELS = {1: "optional", 2: "required", 3: "repeated"}
_TYPE_MESSAGE, _TYPE_ENUM, _TYPE_GROUP = 11, 14, 10


def from_descriptor(fd) -> ProtoFile:
    """Read a ``FileDescriptorProto``."""
    syntax = fd.syntax or "proto2"
    out = ProtoFile(package=fd.package, syntax=syntax, imports=tuple(fd.dependency))
    prefix = fd.package + "." if fd.package else ""
    maps: dict[str, object] = {}

    def walk_enums(enums, scope):
        for e in enums:
            out.enums[scope + e.name] = tuple(v.name for v in e.value)

    def walk(messages, scope):
        for m in messages:
            name = scope + m.name
            if m.options.map_entry:
                maps[name] = m
                continue
            out.messages[name] = ProtoMessage(name)
            walk(m.nested_type, name + ".")
            walk_enums(m.enum_type, name + ".")

    walk(fd.message_type, prefix)
    walk_enums(fd.enum_type, prefix)

    def type_of(f) -> tuple[str, str]:
        if f.type in (_TYPE_MESSAGE, _TYPE_ENUM, _TYPE_GROUP) or f.type_name:
            tn = f.type_name.lstrip(".")
            if tn in maps:
                entry = maps[tn]
                k, v = entry.field[0], entry.field[1]
                return "map", f"map<{type_of(k)[1]},{type_of(v)[1]}>"
            return "named", tn
        return "scalar", _TYPE_NAMES.get(f.type, str(f.type))

    def fill(messages, scope):
        for m in messages:
            name = scope + m.name
            if name in maps:
                continue
            msg = out.messages[name]
            for f in m.field:
                kind, tn = type_of(f)
                oneof = (m.oneof_decl[f.oneof_index].name
                         if f.HasField("oneof_index") and not f.proto3_optional else None)
                label = "" if kind == "map" else _LABELS.get(f.label, "")
                if syntax == "proto3" and label == "optional" and not f.proto3_optional:
                    label = ""
                msg.fields[f.number] = ProtoField(f.name, f.number, kind, tn, label, oneof)
            fill(m.nested_type, name + ".")

    fill(fd.message_type, prefix)
    return out


def to_serialized(text: str) -> str:
    """``.proto`` text as the base64 ``FileDescriptorProto`` clients ask for with
    ``format=serialized`` (what confluent-kafka's Protobuf deserializer reads)."""
    return base64.b64encode(to_descriptor(text).SerializeToString()).decode("ascii")


_SCALAR_CODES = {v: k for k, v in _TYPE_NAMES.items()}


def _camel(name: str) -> str:
    """protoc's map entry name: ``my_field`` -> ``MyFieldEntry``."""
    out, up = [], True
    for c in name:
        if c == "_":
            up = True
        else:
            out.append(c.upper() if up else c)
            up = False
    return "".join(out) + "Entry"


def to_descriptor(text: str):
    """Compile ``.proto`` text into a ``FileDescriptorProto`` (messages, nested types, enums,
    oneofs, maps, proto3 ``optional``, imports; options other than ``map_entry`` are left out).
    A type from an import is left for the reader's pool to resolve by name."""
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast

    pf = from_text(text)   # validates, and knows every local message and enum by full name
    from proto_schema_parser.parser import Parser

    tree = Parser().parse(text)
    FDP = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="schema.proto", package=pf.package or None,
                                            syntax=pf.syntax if pf.syntax == "proto3" else None)
    fd.dependency.extend(pf.imports)
    proto3 = pf.syntax == "proto3"

    def set_type(f, scope: str, type_name: str):
        if type_name in SCALARS:
            f.type = _SCALAR_CODES[type_name]
            return
        full = _resolve(pf, scope, type_name)
        f.type_name = "." + full
        if full in pf.messages:
            f.type = FDP.TYPE_MESSAGE
        elif full in pf.enums:
            f.type = FDP.TYPE_ENUM

    def add_field(msg, scope, el, oneof_index=None):
        f = msg.field.add(name=el.name, number=el.number)
        card = el.cardinality.value.lower() if el.cardinality is not None else ""
        f.label = {"repeated": FDP.LABEL_REPEATED, "required": FDP.LABEL_REQUIRED}.get(card, FDP.LABEL_OPTIONAL)
        set_type(f, scope, el.type)
        if oneof_index is not None:
            f.oneof_index = oneof_index
        elif proto3 and card == "optional":
            f.proto3_optional = True   # its synthetic oneof is added after the real ones

    def fill_enum(e, el):
        for v in el.elements:
            if isinstance(v, ast.EnumValue):
                e.value.add(name=v.name, number=v.number)

    def fill_message(msg, el, full: str):
        for child in el.elements:
            if isinstance(child, ast.Field):
                add_field(msg, full, child)
            elif isinstance(child, ast.MapField):
                entry = msg.nested_type.add(name=_camel(child.name))
                entry.options.map_entry = True
                k = entry.field.add(name="key", number=1, label=FDP.LABEL_OPTIONAL)
                set_type(k, full, child.key_type)
                v = entry.field.add(name="value", number=2, label=FDP.LABEL_OPTIONAL)
                set_type(v, full, child.value_type)
                f = msg.field.add(name=child.name, number=child.number, label=FDP.LABEL_REPEATED,
                                  type=FDP.TYPE_MESSAGE, type_name=f".{full}.{entry.name}")
            elif isinstance(child, ast.OneOf):
                idx = len(msg.oneof_decl)
                msg.oneof_decl.add(name=child.name)
                for f in child.elements:
                    if isinstance(f, ast.Field):
                        add_field(msg, full, f, idx)
            elif isinstance(child, ast.Message):
                fill_message(msg.nested_type.add(name=child.name), child, f"{full}.{child.name}")
            elif isinstance(child, ast.Enum):
                fill_enum(msg.enum_type.add(name=child.name), child)
        for f in msg.field:
            if f.proto3_optional:
                f.oneof_index = len(msg.oneof_decl)
                msg.oneof_decl.add(name="_" + f.name)

    prefix = pf.package + "." if pf.package else ""
    for el in tree.file_elements:
        if isinstance(el, ast.Message):
            fill_message(fd.message_type.add(name=el.name), el, prefix + el.name)
        elif isinstance(el, ast.Enum):
            fill_enum(fd.enum_type.add(name=el.name), el)
    return fd


def to_text(fd) -> str:
    """A ``FileDescriptorProto`` as ``.proto`` text (what the registry shows for a schema
    registered as a serialized descriptor, as Confluent does); type names fully qualified."""
    lines = [f'syntax = "{fd.syntax or "proto2"}";']
    if fd.package:
        lines.append(f"package {fd.package};")
    lines += [f'import "{d}";' for d in fd.dependency]
    proto3 = fd.syntax == "proto3"
    maps: dict[str, object] = {}

    def collect(messages, scope):
        for m in messages:
            name = f"{scope}.{m.name}" if scope else m.name
            if m.options.map_entry:
                maps["." + name] = m
            collect(m.nested_type, name)

    collect(fd.message_type, fd.package)

    def type_of(f) -> str:
        return f.type_name if f.type_name else _TYPE_NAMES.get(f.type, "bytes")

    def field_line(f, in_oneof: bool) -> str:
        if f.type_name in maps:
            entry = maps[f.type_name]
            return f"map<{type_of(entry.field[0])}, {type_of(entry.field[1])}> {f.name} = {f.number};"
        label = _LABELS.get(f.label, "")
        if in_oneof or (proto3 and label == "optional" and not f.proto3_optional):
            label = ""
        return f"{label + ' ' if label else ''}{type_of(f)} {f.name} = {f.number};"

    def enum(e, indent):
        pad = "  " * indent
        out = [f"{pad}enum {e.name} {{"]
        out += [f"{pad}  {v.name} = {v.number};" for v in e.value]
        return out + [f"{pad}}}"]

    def message(m, indent):
        pad = "  " * indent
        out = [f"{pad}message {m.name} {{"]
        real = {i for i, f in enumerate(m.oneof_decl)
                if not any(x.proto3_optional and x.oneof_index == i for x in m.field)}
        done = set()
        for f in m.field:
            if f.HasField("oneof_index") and f.oneof_index in real:
                if f.oneof_index in done:
                    continue
                done.add(f.oneof_index)
                out.append(f"{pad}  oneof {m.oneof_decl[f.oneof_index].name} {{")
                out += [f"{pad}    {field_line(x, True)}" for x in m.field
                        if x.HasField("oneof_index") and x.oneof_index == f.oneof_index]
                out.append(f"{pad}  }}")
            else:
                out.append(f"{pad}  {field_line(f, False)}")
        for n in m.nested_type:
            if not n.options.map_entry:
                out += message(n, indent + 1)
        for e in m.enum_type:
            out += enum(e, indent + 1)
        return out + [f"{pad}}}"]

    for m in fd.message_type:
        lines += message(m, 0)
    for e in fd.enum_type:
        lines += enum(e, 0)
    return "\n".join(lines) + "\n"
