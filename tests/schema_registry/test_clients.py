"""confluent-kafka's SchemaRegistryClient and its Avro, Protobuf and JSON Schema serializers
against the broker's registry: produce through the broker, consume and deserialize back."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkastore.topics.admin import create_topic
from kafkastore.storage import Storage


def _topic(module_root, name):
    create_topic(Storage(module_root), name, 1)
    return name


def _roundtrip(broker, topic, serializer, deserializer, values, already: int = 0):
    """Produce ``values``, then read the topic from the start (``already`` records were there)."""
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, value=serializer(v, ctx))
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    for _ in range(60):
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.value()[:5], deserializer(m.value(), ctx)))
        if len(got) == already + len(values):
            break
    c.close()
    return got


USER_V1 = {"type": "record", "name": "User", "namespace": "shop",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}


def test_avro_serializer_registers_and_roundtrips(broker, module_root, registry_url):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    topic = _topic(module_root, "users-avro")
    client = SchemaRegistryClient({"url": registry_url})
    ser = AvroSerializer(client, json.dumps(USER_V1))
    de = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    got = _roundtrip(broker, topic, ser, de, [{"name": "ada", "age": 36}, {"name": "bob", "age": 7}])
    sid = client.get_latest_version(f"{topic}-value").schema_id
    assert [g[0] for g in got] == [b"\x00" + sid.to_bytes(4, "big")] * 2
    assert [g[1] for g in got] == [{"name": "ada", "age": 36}, {"name": "bob", "age": 7}]
    # Evolve: a field with a default is BACKWARD compatible; the old reader-side still decodes.
    v2 = dict(USER_V1, fields=USER_V1["fields"] + [{"name": "email", "type": ["null", "string"],
                                                      "default": None}])
    got2 = _roundtrip(broker, topic, AvroSerializer(client, json.dumps(v2)), de,
                      [{"name": "cy", "age": 1, "email": "c@x"}], already=2)
    sid2 = client.get_version(f"{topic}-value", 2).schema_id
    assert sid2 != sid and got2[2] == (b"\x00" + sid2.to_bytes(4, "big"),
                                       {"name": "cy", "age": 1, "email": "c@x"})
    assert client.get_subjects() and f"{topic}-value" in client.get_subjects()
    assert client.get_versions(f"{topic}-value") == [1, 2]


def test_client_api_register_lookup_versions_config_delete(registry_url):
    client = SchemaRegistryClient({"url": registry_url})
    subject = f"api-{uuid.uuid4().hex[:8]}"
    s1 = Schema(json.dumps(USER_V1), "AVRO")
    sid = client.register_schema(subject, s1)
    assert client.register_schema(subject, s1) == sid                     # same schema, same id
    assert client.register_schema(f"{subject}-copy", s1) == sid           # other subject, same id
    assert json.loads(client.get_schema(sid).schema_str) == USER_V1
    assert client.lookup_schema(subject, s1).version == 1
    uses = {(v.subject, v.version) for v in client.get_schema_versions(sid)}
    assert {(subject, 1), (f"{subject}-copy", 1)} <= uses
    assert {subject, f"{subject}-copy"} <= set(client.get_subjects_by_schema_id(sid))
    # BACKWARD (default): a new field without a default is refused with 409.
    bad = dict(USER_V1, fields=USER_V1["fields"] + [{"name": "x", "type": "int"}])
    assert client.test_compatibility(subject, Schema(json.dumps(bad), "AVRO")) is False
    with pytest.raises(ClientError) as e:
        client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    # NONE on the subject lets it through; the global level stays.
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.get_compatibility() == "BACKWARD"
    sid2 = client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
    assert sid2 != sid and client.get_versions(subject) == [1, 2]
    # Deletes: soft, then hard; unknown subject is 40401.
    assert client.delete_version(subject, 2) == 2
    assert client.get_versions(subject) == [1]
    assert client.delete_version(subject, 2, permanent=True) == 2
    assert client.delete_subject(subject) == [1]
    with pytest.raises(ClientError) as e:
        client.get_versions(subject)
    assert e.value.error_code == 40401
    assert client.delete_subject(subject, permanent=True) == [1]
    with pytest.raises(ClientError) as e:
        client.get_schema(10 ** 6)
    assert e.value.error_code == 40403


def _order_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    m = fd.message_type.add(name="Order")
    F = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="item", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_serializer_registers_and_roundtrips(broker, module_root, registry_url):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    Order = _order_class()
    topic = _topic(module_root, "orders-proto")
    client = SchemaRegistryClient({"url": registry_url})
    ser = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    de = ProtobufDeserializer(Order, {"use.deprecated.format": False}, client)
    got = _roundtrip(broker, topic, ser, de, [Order(id=1, item="tea"), Order(id=2, item="cake")])
    assert [(o.id, o.item) for _, o in got] == [(1, "tea"), (2, "cake")]
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # .proto text of the same message changing a field's type is refused (409).
    bad = 'syntax = "proto3"; package shop; message Order { string id = 1; string item = 2; }'
    with pytest.raises(ClientError) as e:
        client.register_schema(f"{topic}-value", Schema(bad, "PROTOBUF"))
    assert e.value.http_status_code == 409
    # Registered as a serialized descriptor, shown as .proto text (as Confluent shows it).
    shown = SchemaRegistryClient({"url": registry_url}).get_schema(latest.schema_id).schema_str
    assert "message Order {" in shown and "int64 id = 1;" in shown
    # A .proto text registration is served to the Python deserializer (format=serialized)
    # compiled to a descriptor: producing with it as the latest version reads back.
    ok = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string item = 2; int32 n = 3; }'
    sid2 = client.register_schema(f"{topic}-value", Schema(ok, "PROTOBUF"))
    assert sid2 != latest.schema_id
    ser2 = ProtobufSerializer(Order, SchemaRegistryClient({"url": registry_url}),
                              {"use.deprecated.format": False, "auto.register.schemas": False,
                               "use.latest.version": True})
    de2 = ProtobufDeserializer(Order, {"use.deprecated.format": False},
                               SchemaRegistryClient({"url": registry_url}))
    got = _roundtrip(broker, topic, ser2, de2, [Order(id=3, item="pie")], already=2)
    assert got[2][0] == b"\x00" + sid2.to_bytes(4, "big") and (got[2][1].id, got[2][1].item) == (3, "pie")


PAYMENT = {"type": "object", "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
           "required": ["id"], "additionalProperties": False}


def test_json_serializer_registers_and_roundtrips(broker, module_root, registry_url):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    topic = _topic(module_root, "payments-json")
    client = SchemaRegistryClient({"url": registry_url})
    ser = JSONSerializer(json.dumps(PAYMENT), client)
    de = JSONDeserializer(json.dumps(PAYMENT), schema_registry_client=client)
    got = _roundtrip(broker, topic, ser, de, [{"id": 1, "amount": 2.5}, {"id": 2}])
    assert [g[1] for g in got] == [{"id": 1, "amount": 2.5}, {"id": 2}]
    narrowed = dict(PAYMENT, properties={"id": {"type": "string"}, "amount": {"type": "number"}})
    with pytest.raises(ClientError) as e:
        client.register_schema(f"{topic}-value", Schema(json.dumps(narrowed), "JSON"))
    assert e.value.http_status_code == 409
    # Adding an optional property to a closed model is compatible.
    wider = dict(PAYMENT, properties={**PAYMENT["properties"], "note": {"type": "string"}})
    assert client.register_schema(f"{topic}-value", Schema(json.dumps(wider), "JSON"))
