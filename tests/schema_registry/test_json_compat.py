"""JSON Schema compatibility rules (the common cases of Confluent's JsonSchemaDiff), one row per
rule: (name, reader, writer, the difference or None). Documents valid under the writer must be
valid under the reader."""
from __future__ import annotations

import pytest

from kafkastore.schema_registry.json_compat import incompatibilities


def obj(props, required=(), closed=False, **kw):
    out = {"type": "object", "properties": props, **kw}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


S, I, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}

CASES = [
    ("same", obj({"a": S}), obj({"a": S}), None),
    ("integer widened to number", obj({"a": N}), obj({"a": I}), None),
    ("number narrowed to integer", obj({"a": I}), obj({"a": N}), "TYPE_NARROWED"),
    ("type changed", obj({"a": S}), obj({"a": I}), "TYPE_CHANGED"),
    ("type union widened", obj({"a": {"type": ["string", "null"]}}), obj({"a": S}), None),
    ("type union narrowed", obj({"a": S}), obj({"a": {"type": ["string", "null"]}}), "TYPE_NARROWED"),
    ("property added to an open writer", obj({"a": S, "b": I}), obj({"a": S}),
     "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"),
    ("property added to a closed writer", obj({"a": S, "b": I}), obj({"a": S}, closed=True), None),
    ("property removed, open reader", obj({"a": S}), obj({"a": S, "b": I}), None),
    ("property removed, closed reader", obj({"a": S}, closed=True), obj({"a": S, "b": I}, closed=True),
     "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"),
    ("reader closes the content model", obj({"a": S}, closed=True), obj({"a": S}),
     "ADDITIONAL_PROPERTIES_NARROWED"),
    ("reader opens the content model", obj({"a": S}), obj({"a": S}, closed=True), None),
    ("required added", obj({"a": S}, required=["a"]), obj({"a": S}), "REQUIRED_ATTRIBUTE_ADDED"),
    ("required removed", obj({"a": S}), obj({"a": S}, required=["a"]), None),
    ("enum widened", {"enum": ["A", "B", "C"]}, {"enum": ["A", "B"]}, None),
    ("enum narrowed", {"enum": ["A"]}, {"enum": ["A", "B"]}, "ENUM_ARRAY_NARROWED"),
    ("maximum decreased", {"type": "integer", "maximum": 5}, {"type": "integer", "maximum": 10},
     "MAXIMUM_DECREASED"),
    ("maximum increased", {"type": "integer", "maximum": 10}, {"type": "integer", "maximum": 5}, None),
    ("maxLength added", {"type": "string", "maxLength": 3}, S, "MAXLENGTH_ADDED"),
    ("minLength increased", {"type": "string", "minLength": 3}, {"type": "string", "minLength": 1},
     "MINLENGTH_INCREASED"),
    ("array items narrowed", {"type": "array", "items": I}, {"type": "array", "items": N}, "TYPE_NARROWED"),
    ("array items widened", {"type": "array", "items": N}, {"type": "array", "items": I}, None),
    ("nested property type changed", obj({"o": obj({"x": S})}), obj({"o": obj({"x": I})}), "TYPE_CHANGED"),
    ("oneOf gains a branch", {"oneOf": [S, I, {"type": "null"}]}, {"oneOf": [S, I]}, None),
    ("oneOf loses a branch", {"oneOf": [S]}, {"oneOf": [S, I]}, "COMBINED_TYPE_SUBSCHEMAS_CHANGED"),
    ("local $ref followed", {"definitions": {"x": I}, "$ref": "#/definitions/x"},
     {"definitions": {"x": S}, "$ref": "#/definitions/x"}, "TYPE_CHANGED"),
    ("any reader", {}, obj({"a": S}), None),
]


@pytest.mark.parametrize("name,reader,writer,difference", CASES, ids=[c[0] for c in CASES])
def test_rule(name, reader, writer, difference):
    problems = incompatibilities(reader, writer)
    if difference is None:
        assert problems == []
    else:
        assert problems and any(difference in p for p in problems), problems
