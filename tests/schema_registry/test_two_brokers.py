"""Two brokers of one root serve one registry: the same ids everywhere, never one id for two
schemas even when both register at once; ``_schemas`` is refused to ordinary producers."""
from __future__ import annotations

import json
import threading

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.helpers.registry_broker import start_broker


@pytest.fixture(scope="module")
def pair(module_root, broker):
    other = start_broker(module_root)
    yield broker, other
    other.stop()


def _avro(i: int, name: str = "R") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name,
                              "fields": [{"name": f"f{i}", "type": "int"}]}), "AVRO")


def _client(b):
    return SchemaRegistryClient({"url": b.server.schema_registry.url})


def test_a_schema_registered_on_one_broker_is_served_by_the_other(pair):
    a, b = pair
    sid = _client(a).register_schema("shared-value", _avro(0))
    got = _client(b).get_schema(sid)          # a miss reads _schemas to its head at once
    assert json.loads(got.schema_str)["fields"][0]["name"] == "f0"
    assert _client(b).get_versions("shared-value") == [1]
    # The same schema registered through the other broker keeps its id.
    assert _client(b).register_schema("shared-value", _avro(0)) == sid


def test_concurrent_registrations_on_both_brokers_get_distinct_ids(pair):
    a, b = pair
    results: dict[tuple[str, int], int] = {}
    errors = []

    def run(broker, tag):
        client = _client(broker)
        try:
            for i in range(6):
                # Different schemas in one subject per broker, and one subject both write.
                results[(tag, i)] = client.register_schema(f"race-{tag}", _avro(i, name=f"R{tag}"))
                client.register_schema("race-both", Schema(json.dumps(
                    {"type": "record", "name": "B", "fields": [
                        {"name": f"f{i}", "type": "int", "default": 0}]}), "AVRO"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for tag in "ab":
        _client(a).set_compatibility(f"race-{tag}", "NONE")
    threads = [threading.Thread(target=run, args=(a, "a")), threading.Thread(target=run, args=(b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    ids = list(results.values())
    assert len(set(ids)) == len(ids) == 12
    # Both brokers agree on what every id is, and on the shared subject's versions.
    for (tag, i), sid in results.items():
        for broker in (a, b):
            s = json.loads(SchemaRegistryClient({"url": broker.server.schema_registry.url})
                           .get_schema(sid).schema_str)
            assert (s["name"], s["fields"][0]["name"]) == (f"R{tag}", f"f{i}")
    va, vb = _client(a).get_versions("race-both"), _client(b).get_versions("race-both")
    assert va == vb and len(va) == 6   # each field name once: the second writer found it


def test_schemas_topic_is_refused_to_producers(pair):
    a, _ = pair
    _client(a).register_schema("exists-value", _avro(99))   # the topic exists
    p = Producer({"bootstrap.servers": a.bootstrap, "message.timeout.ms": 5000})
    errors = []
    p.produce("_schemas", key=b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}',
              value=b'{"id": 1}', on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    with pytest.raises(KafkaException):
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": a.bootstrap}).delete_topics(["_schemas"])["_schemas"].result(10)


def _rest(b, method: str, path: str, body=None) -> dict:
    import urllib.request

    req = urllib.request.Request(b.server.schema_registry.url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_a_subject_mode_and_level_set_on_one_broker_are_read_on_the_other_at_once(pair):
    a, b = pair
    _rest(b, "GET", "/mode")  # b has just read _schemas: only a miss makes it read again
    _rest(a, "PUT", "/mode/settings-shared", {"mode": "READONLY"})
    _rest(a, "PUT", "/config/settings-shared", {"compatibility": "FULL"})
    assert _rest(b, "GET", "/mode/settings-shared") == {"mode": "READONLY"}
    assert _rest(b, "GET", "/config/settings-shared") == {"compatibilityLevel": "FULL"}
