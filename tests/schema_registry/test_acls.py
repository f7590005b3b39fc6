"""The registry obeys the root's ACLs (serve --authorizer): subject-level READ/WRITE/DELETE on
the topic of a ``-key``/``-value`` subject (else the TOPIC named like the subject), the global
config and mode as the cluster's DESCRIBE_CONFIGS/ALTER_CONFIGS, ids readable through a subject
that uses them, listings filtered; super users may do anything."""
from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError

from kafkastore.cluster.acls import (AclBinding, Operation, PatternType, Permission, ResourceType,
                                     acl_document, add_acls)
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage

USERS = {"admin": "adm", "alice": "al", "mallory": "ml"}
V1 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
V2 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                           {"name": "b", "type": "int", "default": 0}]})


def allow(principal, op, rt=ResourceType.TOPIC, name="orders", pattern=PatternType.LITERAL):
    return AclBinding(rt, name, pattern, principal, "*", op, Permission.ALLOW)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = "file://" + str(tmp_path_factory.mktemp("acl-registry"))
    storage = Storage(root)
    add_acls(acl_document(storage), [allow("User:alice", op) for op in
                                     (Operation.READ, Operation.WRITE, Operation.DELETE)])
    b = BrokerThread(storage, ServeOptions(
        port=0, commit_interval_ms=2, heartbeat_ms=500, credentials=dict(USERS), authorizer=True,
        super_users=("User:admin",), schema_registry_listen=("127.0.0.1", 0))).start()
    admin = client(b, "admin")
    admin.register_schema("other-value", Schema(V1, "AVRO"))
    yield b
    b.stop()


def client(b, user) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": b.server.schema_registry.url,
                                 "basic.auth.user.info": f"{user}:{USERS[user]}"})


def call(b, user, method, path, body=None):
    """``(status, json)`` of one raw request as ``user``."""
    u = urlsplit(b.server.schema_registry.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    token = base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, raw.decode()


def endpoints(subject: str, sid: int) -> list[tuple]:
    """Every route the registry serves, as ``(method, path, body, kind)``: kind ``list`` for
    listings (filtered), ``open`` for what needs no ACL, else ``acl``. Ordered so that the
    writes and deletes come last (they succeed for a user allowed them)."""
    s, sch = subject, {"schema": V2}
    return [
        ("GET", "/", None, "open"),
        ("GET", "/schemas/types", None, "open"),
        ("GET", "/subjects", None, "list"),
        ("GET", "/schemas", None, "list"),
        ("GET", "/contexts", None, "list"),
        ("GET", f"/schemas/ids/{sid}", None, "acl"),
        ("GET", f"/schemas/ids/{sid}/schema", None, "acl"),
        ("GET", f"/schemas/ids/{sid}/versions", None, "acl"),
        ("GET", f"/schemas/ids/{sid}/subjects", None, "acl"),
        ("GET", f"/subjects/{s}/versions", None, "acl"),
        ("GET", f"/subjects/{s}/versions/1", None, "acl"),
        ("GET", f"/subjects/{s}/versions/1/schema", None, "acl"),
        ("GET", f"/subjects/{s}/versions/1/referencedby", None, "acl"),
        ("POST", f"/subjects/{s}", {"schema": V1}, "acl"),
        ("POST", f"/compatibility/subjects/{s}/versions", sch, "acl"),
        ("POST", f"/compatibility/subjects/{s}/versions/latest", sch, "acl"),
        ("GET", f"/config/{s}?defaultToGlobal=true", None, "acl"),
        ("GET", f"/mode/{s}?defaultToGlobal=true", None, "acl"),
        ("GET", "/config", None, "cluster"),
        ("GET", "/mode", None, "cluster"),
        ("PUT", "/config", {"compatibility": "NONE"}, "cluster"),
        ("PUT", "/mode", {"mode": "READONLY"}, "cluster"),
        ("DELETE", "/config", None, "cluster"),
        ("PUT", f"/config/{s}", {"compatibility": "FULL"}, "acl"),
        ("DELETE", f"/config/{s}", None, "acl"),
        ("PUT", f"/mode/{s}", {"mode": "READWRITE"}, "acl"),
        ("DELETE", f"/mode/{s}", None, "acl"),
        ("POST", f"/subjects/{s}/versions", sch, "acl"),
        ("DELETE", f"/subjects/{s}/versions/2", None, "acl"),
        ("DELETE", f"/subjects/{s}/versions/2?permanent=true", None, "acl"),
        ("DELETE", f"/subjects/{s}", None, "acl"),
        ("DELETE", f"/subjects/{s}?permanent=true", None, "acl"),
    ]


def test_the_sweep_names_every_route_of_the_router():
    """Every (method, first segment) the router answers is in the sweep."""
    import inspect

    from kafkastore.schema_registry import http as H

    src = inspect.getsource(H._Handler._route)
    swept = {(m, (p.split("/")[1] or "/").split("?")[0]) for m, p, _b, _k in endpoints("x-value", 1)}
    for head in ("subjects", "schemas", "contexts", "config", "mode", "compatibility"):
        assert f'"{head}"' in src and any(h == head for _m, h in swept), head
    assert {m for m, _h in swept} == {"GET", "POST", "PUT", "DELETE"}


def test_a_user_without_acls_is_refused_everything_and_sees_empty_lists(broker):
    sid = client(broker, "admin").register_schema("orders-value", Schema(V1, "AVRO"))
    for method, path, body, kind in endpoints("orders-value", sid):
        status, out = call(broker, "mallory", method, path, body)
        if kind == "open":
            assert status == 200, (method, path, status, out)
        elif kind == "list":
            assert (status, out) == (200, []), (method, path, status, out)
        else:
            assert status == 403 and out["error_code"] == 40301, (method, path, status, out)
    # An id nobody uses is refused the same way: nothing tells what exists.
    assert call(broker, "mallory", "GET", "/schemas/ids/999999")[0] == 403
    assert call(broker, "admin", "GET", "/schemas/ids/999999")[0] == 404


def test_a_user_with_the_topics_acls_may_use_its_subjects(broker):
    admin = client(broker, "admin")
    sid = admin.register_schema("orders-key", Schema(V1, "AVRO"))
    for method, path, body, kind in endpoints("orders-key", sid):
        status, out = call(broker, "alice", method, path, body)
        if kind == "cluster":
            assert status == 403 and out["error_code"] == 40301, (method, path, status, out)
        else:
            assert status == 200, (method, path, status, out)
        if kind == "list" and path != "/contexts":
            subjects = {x if isinstance(x, str) else x["subject"] for x in out}
            assert "other-value" not in subjects, (path, out)
    # The subject went through its whole life: registered, soft then hard deleted.
    assert call(broker, "admin", "GET", "/subjects/orders-key/versions")[0] == 404


def test_a_user_with_the_right_client_reads_and_registers_only_its_topics_subjects(broker):
    alice = client(broker, "alice")
    alice.register_schema("orders-value", Schema(V1, "AVRO"))
    assert "other-value" not in alice.get_subjects()
    with pytest.raises(ClientError) as e:
        alice.register_schema("other-value", Schema(V2, "AVRO"))
    assert (e.value.http_status_code, e.value.error_code) == (403, 40301)
    with pytest.raises(ClientError) as e:
        alice.get_latest_version("other-value")
    assert e.value.http_status_code == 403


def test_no_acls_cannot_lock_the_registry_or_delete_another_tenants_subject(broker):
    admin = client(broker, "admin")
    sid = admin.register_schema("tenant-value", Schema(V1, "AVRO"))
    call(broker, "admin", "DELETE", "/subjects/tenant-value")   # soft: hard delete now possible
    assert call(broker, "mallory", "PUT", "/mode", {"mode": "READONLY"})[1]["error_code"] == 40301
    assert call(broker, "mallory", "PUT", "/config", {"compatibility": "NONE"})[1]["error_code"] == 40301
    assert call(broker, "mallory", "DELETE", "/subjects/tenant-value?permanent=true")[1]["error_code"] == 40301
    assert call(broker, "admin", "GET", "/mode")[1] == {"mode": "READWRITE"}
    assert call(broker, "admin", "GET", "/config")[1]["compatibilityLevel"] == "BACKWARD"
    status, out = call(broker, "admin", "GET", f"/schemas/ids/{sid}")
    assert status == 200 and "schema" in out
    assert call(broker, "admin", "GET", "/subjects/tenant-value/versions?deleted=true")[1] == [1]


def test_cluster_alter_configs_allows_the_global_settings(broker):
    storage = broker.server.storage
    add_acls(acl_document(storage), [allow("User:alice", Operation.ALTER_CONFIGS, ResourceType.CLUSTER,
                                           "kafka-cluster")])
    broker.server.authorizer.load()
    assert call(broker, "alice", "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert call(broker, "alice", "PUT", "/config", {"compatibility": "FULL"})[0] == 200
    assert call(broker, "alice", "DELETE", "/config")[0] == 200


def test_a_schema_may_reference_only_readable_subjects(broker):
    body = {"schema": json.dumps({"type": "record", "name": "W", "fields": [{"name": "r", "type": "R"}]}),
            "references": [{"name": "R", "subject": "other-value", "version": 1}]}
    status, out = call(broker, "alice", "POST", "/subjects/orders-value/versions", body)
    assert status == 403 and out["error_code"] == 40301
