"""``_schemas`` storage: Confluent's record shapes, replay, and the conditional append that
keeps ids unique across brokers."""
from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import RequirementFailedError
from kafkastore.read.reader import PartitionReader
from kafkastore.schema_registry.state import (RegistryState, SchemaVersion, config_key, config_value,
                                              schema_key, schema_value)
from kafkastore.schema_registry.service import SchemaRegistryService
from kafkastore.schema_registry.store import SCHEMAS_TOPIC, SchemaStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic


def test_records_have_confluents_shapes():
    assert schema_key("orders-value", 3) == \
        b'{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}'
    assert config_key(None) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert config_value("FULL") == b'{"compatibilityLevel":"FULL"}'
    v = SchemaVersion("s", 1, 7, "PROTOBUF", "syntax = \"proto3\";", ({"name": "a", "subject": "b",
                                                                      "version": 1},))
    assert schema_value(v) == (b'{"subject":"s","version":1,"id":7,"schemaType":"PROTOBUF",'
                               b'"references":[{"name":"a","subject":"b","version":1}],'
                               b'"schema":"syntax = \\"proto3\\";","deleted":false}')
    avro = SchemaVersion("s", 1, 7, "AVRO", '"int"')
    assert b"schemaType" not in schema_value(avro)


@pytest.mark.parametrize("key,value", [
    (b"not json", b"{}"), (b'{"keytype":"NOOP","magic":0}', None), (b"[1]", b"{}"),
    (b'{"keytype":"SCHEMA","subject":"s","version":"1","magic":1}', b"{}"),
    (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"id":"x","schema":1}'),
    (None, b"{}"),
])
def test_replay_skips_what_it_does_not_know(key, value):
    state = RegistryState()
    assert state.apply(key, value) is False
    assert state == RegistryState()


def test_a_commit_expecting_an_old_high_watermark_writes_nothing(local_root):
    storage = Storage(local_root)
    create_topic(storage, "t", 1)
    a, b = Broker(storage), Broker(storage)
    for br in (a, b):
        br.expect_high_watermark = {("t", 0): 0}
    a.send("t", b"first", partition=0)
    a.flush()
    b.send("t", b"second", partition=0)
    with pytest.raises(RequirementFailedError, match="high watermark is 1, expected 0"):
        b.flush()
    assert PartitionReader(storage, "t", 0).high_watermark == 1


def test_a_write_plans_again_on_what_another_broker_appended(root_url):
    storage = Storage(root_url)
    one, two = SchemaStore(storage), SchemaStore(storage)
    bases = []

    def register(subject):
        def plan(state):
            bases.append(state.max_id)
            sv = SchemaVersion(subject, 1, state.max_id + 1, "AVRO", f'"{subject}"')
            return [(schema_key(subject, 1), schema_value(sv))], sv.id
        return plan

    two.refresh(force=True)                  # two has read the (empty) log
    assert one.write(register("a")) == 1
    # two's plan runs on its refreshed head: it sees a's record before allocating.
    assert two.write(register("b")) == 2
    assert bases == [0, 1]
    # Forced conflict: the head moved after two planned (a third writer lands in between).
    landed = []

    def racing(state):
        if not landed:
            landed.append(one.write(register("c")))   # lands first: id 3
        return register("d")(state)

    assert two.write(racing) == 4 and landed == [3]
    assert sorted(v.id for s in two.refresh(force=True).subjects.values() for v in s.values()) == [1, 2, 3, 4]
    assert PartitionReader(storage, SCHEMAS_TOPIC, 0).high_watermark == 4


SCHEMAS = [json.dumps({"type": "record", "name": "R", "fields": [{"name": f, "type": "int", "default": 0}]})
           for f in ("a", "b", "c")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["s1", "s2"]), st.integers(0, 2)),
                    min_size=1, max_size=12))
def test_two_brokers_agree_on_ids_whatever_the_order(ops):
    """Registrations spread over two registries of one root, in any order: one id per distinct
    schema, registering again returns it, and both registries end with the same state."""
    url = f"memory://registry-{uuid.uuid4().hex}"
    services = [SchemaRegistryService(SchemaStore(Storage(url), refresh_interval_s=3600))
                for _ in range(2)]
    ids: dict[int, int] = {}
    try:
        for who, subject, k in ops:
            got = services[who].register(subject, {"schema": SCHEMAS[k]})["id"]
            assert ids.setdefault(k, got) == got
        assert sorted(ids.values()) == list(range(1, len(ids) + 1))
        views = [svc.store.refresh(force=True) for svc in services]
        assert views[0].subjects == views[1].subjects and views[0].by_id == views[1].by_id
    finally:
        import fsspec

        for _ in range(3):   # a background merge may still be adding to the root
            try:
                fsspec.filesystem("memory").rm(url.split("://", 1)[1], recursive=True)
                break
            except FileNotFoundError:
                continue
