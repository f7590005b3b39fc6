"""Avro schema resolution rules (Avro's SchemaCompatibility, what Confluent checks), one row per
rule: (name, reader, writer, compatible)."""
from __future__ import annotations

import json

import pytest

from kafkastore.schema_registry import formats as F
from kafkastore.schema_registry.avro_compat import incompatibilities


def rec(*fields, name="User"):
    return {"type": "record", "name": name, "fields": list(fields)}


def f(name, type_, **kw):
    return {"name": name, "type": type_, **kw}


def parsed(schema):
    return F.parse(F.AVRO, json.dumps(schema), [], lambda ref: None)


CASES = [
    ("same primitive", "int", "int", True),
    ("int promotes to long", "long", "int", True),
    ("int promotes to float and double", "double", "int", True),
    ("long promotes to float", "float", "long", True),
    ("float promotes to double", "double", "float", True),
    ("long does not narrow to int", "int", "long", False),
    ("double does not narrow to float", "float", "double", False),
    ("string reads bytes", "string", "bytes", True),
    ("bytes reads string", "bytes", "string", True),
    ("int is not a string", "string", "int", False),
    ("reader field with default missing from writer", rec(f("a", "int"), f("b", "string", default="")),
     rec(f("a", "int")), True),
    ("reader field without default missing from writer", rec(f("a", "int"), f("b", "string")),
     rec(f("a", "int")), False),
    ("writer field the reader drops", rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), True),
    ("field type promoted", rec(f("a", "long")), rec(f("a", "int")), True),
    ("field type narrowed", rec(f("a", "int")), rec(f("a", "long")), False),
    ("field found by reader alias", rec(f("b", "int", aliases=["a"])), rec(f("a", "int")), True),
    ("record renamed", rec(f("a", "int"), name="Other"), rec(f("a", "int")), False),
    ("record renamed with alias", {**rec(f("a", "int"), name="Other"), "aliases": ["User"]},
     rec(f("a", "int")), True),
    ("enum symbol added", {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ("enum symbol removed", {"type": "enum", "name": "E", "symbols": ["A"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, False),
    ("enum symbol removed, reader default", {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ("fixed size changed", {"type": "fixed", "name": "F", "size": 4},
     {"type": "fixed", "name": "F", "size": 8}, False),
    ("union gains a branch", ["null", "int", "string"], ["null", "int"], True),
    ("union loses a branch", ["null", "int"], ["null", "int", "string"], False),
    ("writer union into a promoted reader", ["null", "long"], ["null", "int"], True),
    ("plain type into a union", ["null", "string"], "string", True),
    ("union into a plain type", "string", ["null", "string"], False),
    ("nullable field added with default", rec(f("a", "int"), f("n", ["null", "int"], default=None)),
     rec(f("a", "int")), True),
    ("array items promoted", {"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
    ("array items narrowed", {"type": "array", "items": "int"}, {"type": "array", "items": "long"}, False),
    ("map values changed", {"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
    ("nested record field added without default",
     rec(f("inner", rec(f("x", "int"), f("y", "int"), name="Inner"))),
     rec(f("inner", rec(f("x", "int"), name="Inner"))), False),
    ("logical type over its primitive", {"type": "int", "logicalType": "date"}, "int", True),
    ("recursive type", rec(f("next", ["null", "Node"], default=None), f("v", "long"), name="Node"),
     rec(f("next", ["null", "Node"], default=None), f("v", "int"), name="Node"), True),
]


@pytest.mark.parametrize("name,reader,writer,ok", CASES, ids=[c[0] for c in CASES])
def test_rule(name, reader, writer, ok):
    r, w = parsed(reader), parsed(writer)
    problems = incompatibilities(r.obj, w.obj, r.named, w.named)
    assert (not problems) is ok, problems


def test_levels_pick_the_direction():
    old = parsed(rec(f("a", "int")))
    new = parsed(rec(f("a", "int"), f("b", "string")))   # a field without default added
    assert F.incompatibilities(new, old, "BACKWARD")      # new cannot read old data
    assert not F.incompatibilities(new, old, "FORWARD")   # old reads new data (drops b)
    assert F.incompatibilities(new, old, "FULL")
    assert not F.incompatibilities(new, old, "NONE")
