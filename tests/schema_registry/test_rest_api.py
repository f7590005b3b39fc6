"""The REST API over HTTP as any client sees it: Confluent's paths, bodies, error codes and
content type; bad input answered, never a crash."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from kafkastore.schema_registry import SchemaRegistryThread
from kafkastore.storage import Storage

CT = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("rest-root"))


@pytest.fixture(scope="module")
def sr(root):
    with SchemaRegistryThread(Storage(root), port=0, max_body_bytes=64 << 10) as s:
        yield s


def call(sr, method, path, body=None, raw: bytes | None = None, headers=None):
    u = urlsplit(sr.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": CT, **(headers or {})})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    try:
        return r.status, json.loads(text), r.getheader("Content-Type")
    except ValueError:
        return r.status, text, r.getheader("Content-Type")


def rec(name, *fields):
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": t, **kw} for f, t, kw in fields]})


def test_register_read_and_list(sr):
    s, body, ct = call(sr, "POST", "/subjects/a-value/versions", {"schema": rec("A", ("x", "int", {}))})
    assert (s, ct) == (200, CT) and isinstance(body["id"], int)
    sid = body["id"]
    assert call(sr, "GET", "/subjects")[1] == ["a-value"]
    assert call(sr, "GET", "/subjects/a-value/versions")[1] == [1]
    s, v, _ = call(sr, "GET", "/subjects/a-value/versions/latest")
    assert v == {"subject": "a-value", "version": 1, "id": sid,
                 "schema": '{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}'}
    assert call(sr, "GET", "/subjects/a-value/versions/1/schema")[1] == json.loads(v["schema"])
    assert call(sr, "GET", f"/schemas/ids/{sid}")[1] == {"schema": v["schema"]}
    assert call(sr, "GET", f"/schemas/ids/{sid}/versions")[1] == [{"subject": "a-value", "version": 1}]
    assert call(sr, "GET", f"/schemas/ids/{sid}/subjects")[1] == ["a-value"]
    assert call(sr, "GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    # Lookup: whitespace does not matter (compared in compact form).
    s, found, _ = call(sr, "POST", "/subjects/a-value",
                       {"schema": json.dumps(json.loads(v["schema"]), indent=2)})
    assert (s, found["id"], found["version"]) == (200, sid, 1)


@pytest.mark.parametrize("method,path,body,status,code", [
    ("GET", "/subjects/nope/versions", None, 404, 40401),
    ("GET", "/subjects/nope/versions/1", None, 404, 40401),
    ("GET", "/subjects/a-value/versions/9", None, 404, 40402),
    ("GET", "/subjects/a-value/versions/0", None, 422, 42202),
    ("GET", "/subjects/a-value/versions/x", None, 422, 42202),
    ("GET", "/schemas/ids/99999", None, 404, 40403),
    ("GET", "/schemas/ids/abc", None, 404, 40403),
    ("POST", "/subjects/a-value", {"schema": '{"type":"string"}'}, 404, 40403),
    ("POST", "/subjects/b-value/versions", {"schema": "{not json"}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": '{"type":"record","name":"R"}'}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": '{"type":"nope"}'}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": "x", "schemaType": "XML"}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": "message {", "schemaType": "PROTOBUF"}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": '{"type": 5}', "schemaType": "JSON"}, 422, 42201),
    ("POST", "/subjects/b-value/versions", {"nothing": 1}, 422, 42201),
    ("POST", "/subjects/b-value/versions",
     {"schema": '{"type":"object","properties":{"a":' * 300 + "{}" + "}}" * 300, "schemaType": "JSON"},
     422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": '{"type":"array","items":' * 300 + '"int"' + "}" * 300},
     422, 42201),
    ("POST", "/subjects/b-value/versions", [1, 2], 422, 42201),
    ("POST", "/subjects/b-value/versions", {"schema": '"int"', "references": "x"}, 422, 42201),
    ("POST", "/subjects/b-value/versions",
     {"schema": '"int"', "references": [{"name": "n", "subject": "nope", "version": 1}]}, 422, 42201),
    ("PUT", "/config", {"compatibility": "SIDEWAYS"}, 422, 42203),
    ("PUT", "/mode", {"mode": "SOMETIMES"}, 422, 42204),
    ("GET", "/config/nope", None, 404, 40408),
    ("GET", "/mode/nope", None, 404, 40409),
    ("GET", "/no/such/path", None, 404, 404),
    ("PATCH", "/subjects", {}, 405, 405),
    ("POST", "/compatibility/subjects/nope/versions/1", {"schema": '"int"'}, 404, 40401),
])
def test_errors_have_confluent_codes(sr, method, path, body, status, code):
    call(sr, "POST", "/subjects/a-value/versions", {"schema": rec("A", ("x", "int", {}))})
    s, got, ct = call(sr, method, path, body)
    assert (s, got["error_code"], ct) == (status, code, CT), got
    assert isinstance(got["message"], str) and got["message"]


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe", b"[" * 30000, b'{"schema": "\\ud800"}'])
def test_malformed_bodies_are_400_or_422(sr, raw):
    s, got, _ = call(sr, "POST", "/subjects/m-value/versions", raw=raw)
    assert s in (400, 422) and got["error_code"] in (400, 42201)
    assert call(sr, "GET", "/subjects")[0] == 200       # still serving


def test_oversized_body_is_refused(sr):
    s, got, _ = call(sr, "POST", "/subjects/big-value/versions",
                     {"schema": json.dumps({"type": "string", "doc": "x" * (100 << 10)})})
    assert (s, got["error_code"]) == (413, 413)
    assert call(sr, "GET", "/subjects")[0] == 200


def test_compatibility_endpoint_and_levels(sr):
    v1 = rec("C", ("x", "int", {}))
    v2_bad = rec("C", ("x", "int", {}), ("y", "int", {}))
    v2_ok = rec("C", ("x", "int", {}), ("y", "int", {"default": 0}))
    call(sr, "POST", "/subjects/c-value/versions", {"schema": v1})
    s, got, _ = call(sr, "POST", "/compatibility/subjects/c-value/versions/latest?verbose=true",
                     {"schema": v2_bad})
    assert s == 200 and got["is_compatible"] is False and "y" in got["messages"][0]
    assert call(sr, "POST", "/compatibility/subjects/c-value/versions/1", {"schema": v2_ok})[1] == \
        {"is_compatible": True}
    s, got, _ = call(sr, "POST", "/subjects/c-value/versions", {"schema": v2_bad})
    assert (s, got["error_code"]) == (409, 409)
    assert call(sr, "PUT", "/config/c-value", {"compatibility": "FORWARD"})[1] == {"compatibility": "FORWARD"}
    assert call(sr, "GET", "/config/c-value")[1] == {"compatibilityLevel": "FORWARD"}
    assert call(sr, "GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert call(sr, "POST", "/subjects/c-value/versions", {"schema": v2_bad})[0] == 200   # FORWARD: ok
    # Transitive: v3 drops y's default: fine against v2 (FORWARD), checked against v1 too.
    assert call(sr, "DELETE", "/config/c-value")[1] == {"compatibilityLevel": "FORWARD"}
    assert call(sr, "GET", "/config/c-value?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}


def test_transitive_checks_every_version(sr):
    a = rec("T", ("x", "int", {}))
    b = rec("T", ("x", "int", {}), ("y", "int", {"default": 0}))
    c = rec("T", ("y", "int", {"default": 0}))   # x removed: v1 cannot read it (no default)
    call(sr, "PUT", "/config/t-value", {"compatibility": "FORWARD"})
    for s in (a, b):
        assert call(sr, "POST", "/subjects/t-value/versions", {"schema": s})[0] == 200
    call(sr, "PUT", "/config/t-value", {"compatibility": "FORWARD_TRANSITIVE"})
    assert call(sr, "POST", "/subjects/t-value/versions", {"schema": c})[0] == 409
    call(sr, "PUT", "/config/t-value", {"compatibility": "BACKWARD"})
    assert call(sr, "POST", "/subjects/t-value/versions", {"schema": c})[0] == 200


def test_soft_and_hard_deletes(sr):
    s1, s2 = rec("D", ("x", "int", {})), rec("D", ("x", "long", {}))
    call(sr, "POST", "/subjects/d-value/versions", {"schema": s1})
    call(sr, "POST", "/subjects/d-value/versions", {"schema": s2})
    assert call(sr, "DELETE", "/subjects/d-value/versions/1?permanent=true")[1]["error_code"] == 40407
    assert call(sr, "DELETE", "/subjects/d-value/versions/1")[1] == 1
    assert call(sr, "DELETE", "/subjects/d-value/versions/1")[1]["error_code"] == 40406
    assert call(sr, "GET", "/subjects/d-value/versions")[1] == [2]
    assert call(sr, "GET", "/subjects/d-value/versions?deleted=true")[1] == [1, 2]
    assert call(sr, "GET", "/subjects/d-value/versions/1")[1]["error_code"] == 40402
    assert call(sr, "GET", "/subjects/d-value/versions/1?deleted=true")[1]["version"] == 1
    assert call(sr, "DELETE", "/subjects/d-value?permanent=true")[1]["error_code"] == 40405
    assert call(sr, "DELETE", "/subjects/d-value")[1] == [2]
    assert call(sr, "DELETE", "/subjects/d-value")[1]["error_code"] == 40404
    assert "d-value" not in call(sr, "GET", "/subjects")[1]
    assert "d-value" in call(sr, "GET", "/subjects?deleted=true")[1]
    assert call(sr, "DELETE", "/subjects/d-value?permanent=true")[1] == [1, 2]
    assert call(sr, "GET", "/subjects/d-value/versions?deleted=true")[1]["error_code"] == 40401
    # Re-registering after a hard delete starts at version 1 again.
    s, body, _ = call(sr, "POST", "/subjects/d-value/versions", {"schema": s1})
    assert s == 200 and call(sr, "GET", "/subjects/d-value/versions")[1] == [1]


def test_references(sr):
    address = json.dumps({"type": "record", "name": "Address", "namespace": "x",
                          "fields": [{"name": "city", "type": "string"}]})
    call(sr, "POST", "/subjects/address/versions", {"schema": address})
    person = json.dumps({"type": "record", "name": "Person", "namespace": "x",
                         "fields": [{"name": "home", "type": "x.Address"}]})
    refs = [{"name": "x.Address", "subject": "address", "version": 1}]
    s, got, _ = call(sr, "POST", "/subjects/person/versions", {"schema": person, "references": refs})
    assert s == 200
    s, by_id, _ = call(sr, "GET", f"/schemas/ids/{got['id']}")
    assert by_id["references"] == refs
    assert call(sr, "GET", "/subjects/address/versions/1/referencedby")[1] == [got["id"]]
    # The referenced version cannot be deleted while referenced.
    assert call(sr, "DELETE", "/subjects/address/versions/1")[1]["error_code"] == 42206
    # Without the reference the schema does not parse.
    assert call(sr, "POST", "/subjects/person2/versions", {"schema": person})[1]["error_code"] == 42201


def test_mode_read_only_refuses_writes(sr):
    assert call(sr, "PUT", "/mode/ro-value", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    s, got, _ = call(sr, "POST", "/subjects/ro-value/versions", {"schema": '"string"'})
    assert (s, got["error_code"]) == (422, 42205)
    assert call(sr, "GET", "/mode")[1] == {"mode": "READWRITE"}
    assert call(sr, "DELETE", "/mode/ro-value")[1] == {"mode": "READONLY"}
    assert call(sr, "POST", "/subjects/ro-value/versions", {"schema": '"string"'})[0] == 200


def test_json_and_protobuf_types(sr):
    js = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    s, got, _ = call(sr, "POST", "/subjects/j-value/versions", {"schema": js, "schemaType": "JSON"})
    assert s == 200
    assert call(sr, "GET", f"/schemas/ids/{got['id']}")[1]["schemaType"] == "JSON"
    proto = 'syntax = "proto3";\npackage p;\nmessage M { int32 a = 1; }\n'
    s, got, _ = call(sr, "POST", "/subjects/p-value/versions", {"schema": proto, "schemaType": "PROTOBUF"})
    assert s == 200
    v = call(sr, "GET", "/subjects/p-value/versions/1")[1]
    assert v["schemaType"] == "PROTOBUF" and "message M" in v["schema"]


def test_a_new_registry_over_the_root_replays_everything(sr, root):
    """State lives only in _schemas: a registry started later (another broker, a restart)
    answers every read the same, soft deletes, configs and modes included."""
    call(sr, "POST", "/subjects/r-value/versions", {"schema": rec("R", ("x", "int", {}))})
    call(sr, "POST", "/subjects/r-value/versions", {"schema": rec("R", ("x", "long", {}))})
    call(sr, "DELETE", "/subjects/r-value/versions/1")
    call(sr, "PUT", "/config/r-value", {"compatibility": "FULL"})
    paths = ["/subjects", "/subjects?deleted=true", "/subjects/r-value/versions?deleted=true",
             "/subjects/r-value/versions/2", "/config/r-value", "/config", "/mode", "/schemas",
             "/subjects/r-value/versions/1"]
    before = [call(sr, "GET", p)[:2] for p in paths]
    with SchemaRegistryThread(Storage(root), port=0) as fresh:
        assert [call(fresh, "GET", p)[:2] for p in paths] == before


def test_import_mode_keeps_given_ids_and_versions(sr):
    """IMPORT (migrating from another registry): the body's id and version are kept; an id
    already held by another schema is refused; outside IMPORT an id cannot be chosen."""
    assert call(sr, "PUT", "/mode/imp-value", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    s, got, _ = call(sr, "POST", "/subjects/imp-value/versions",
                     {"schema": rec("I", ("x", "int", {})), "id": 5000, "version": 3})
    assert (s, got) == (200, {"id": 5000})
    assert call(sr, "GET", "/subjects/imp-value/versions")[1] == [3]
    s, got, _ = call(sr, "POST", "/subjects/imp-value/versions",
                     {"schema": rec("I", ("y", "int", {})), "id": 5000, "version": 4})
    assert (s, got["error_code"]) == (422, 42205)
    s, got, _ = call(sr, "POST", "/subjects/imp-value/versions",
                     {"schema": rec("I", ("y", "int", {})), "id": 5100, "version": 3})
    assert (s, got["error_code"]) == (422, 42205)      # version 3 is taken
    call(sr, "DELETE", "/mode/imp-value")
    s, got, _ = call(sr, "POST", "/subjects/imp-value/versions",
                     {"schema": rec("I", ("x", "int", {}), ("z", "int", {"default": 1})), "id": 6000})
    assert (s, got["error_code"]) == (422, 42205)
    # The next id allocated normally comes after the imported one.
    s, got, _ = call(sr, "POST", "/subjects/imp-value/versions",
                     {"schema": rec("I", ("x", "int", {}), ("z", "int", {"default": 1}))})
    assert s == 200 and got["id"] == 5001
    assert call(sr, "GET", "/subjects/imp-value/versions")[1] == [3, 4]


def test_keep_alive_requests_are_not_held_by_nagle(sr):
    """Headers and body are two writes; without TCP_NODELAY each answer on a kept-alive
    connection waited for the client's delayed ACK (~40 ms: 100 requests took 4.5 s)."""
    import time

    call(sr, "POST", "/subjects/ka-value/versions", {"schema": '"string"'})
    u = urlsplit(sr.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    t = time.perf_counter()
    for _ in range(100):
        conn.request("GET", "/subjects/ka-value/versions/1")
        r = conn.getresponse()
        assert r.status == 200 and r.read()
    conn.close()
    assert time.perf_counter() - t < 2.5
