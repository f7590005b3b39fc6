"""Every API the broker advertises refuses an authenticated user without ACLs as Kafka does.

The sweep reads ApiVersions and sends, for every advertised API, a well-formed request naming
a topic, group, transactional id or cluster resource the user may not use, then checks the
error code Kafka answers (TOPIC_ / GROUP_ / CLUSTER_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
or for listing APIs that nothing of the hidden resources is shown. An API the broker starts
advertising without an entry here fails the sweep."""
from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.protocol.wire import codec
from tests.helpers.acl_broker import (CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
                                      TOPIC_AUTHORIZATION_FAILED,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED, broker, root,  # noqa: F401 - fixtures
                                      sasl_wire, unique)
from tests.helpers.wire_requests import batch

ILLEGAL_SASL_STATE = 34
TOPIC, GROUP, TXN = unique("sweep-secret-"), unique("sweep-group-"), unique("sweep-txn-")


# -- building any kio request from a few fields ----------------------------------------------
def _default(kind: str | None, hint):
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 0
    if kind == "float64":
        return 0.0
    if kind == "bool":
        return False
    if kind in ("string",):
        return "" if type(None) not in typing.get_args(hint) else None
    if kind == "bytes":
        return b""
    if kind == "records":
        return None
    if kind == "uuid":
        return uuid.UUID(int=0) if type(None) not in typing.get_args(hint) else None
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind == "datetime_i64":
        return None
    if kind == "error_code":
        return 0
    return ()


def _element(hint):
    """The entity class of a ``tuple[Entity, ...]`` hint, None for other hints."""
    for h in (hint, *typing.get_args(hint)):
        if typing.get_origin(h) is tuple:
            args = typing.get_args(h)
            if args and dataclasses.is_dataclass(args[0]):
                return args[0]
    return None


def fill(cls, fields: dict):
    """An instance of ``cls`` with ``fields`` (nested entities given as lists of dicts) and
    neutral defaults for the rest."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        kind = f.metadata.get("kafka_type")
        if f.name in fields:
            value = fields[f.name]
            sub = _element(hints[f.name])
            if sub is not None and isinstance(value, list):
                value = tuple(fill(sub, v) for v in value)
            elif isinstance(value, list):
                value = tuple(value)
            elif isinstance(value, dict) and dataclasses.is_dataclass(hints[f.name]):
                value = fill(hints[f.name], value)
            kw[f.name] = value
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        elif dataclasses.is_dataclass(hints[f.name]):
            kw[f.name] = fill(hints[f.name], {})
        else:
            kw[f.name] = _default(kind, hints[f.name])
    return codec.make(cls, **kw)


# -- the sweep: per API the version to use, the request's fields, and the check -------------
def _all_codes(entity, top_level: bool = True) -> list[int]:
    """Every ``error_code`` (and ``partition_error_code``...) in a response, at any depth
    (without the response's own top-level code when ``top_level`` is False)."""
    out = []
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            v = getattr(entity, f.name)
            if f.name in ("error_code", "partition_error_code"):
                if top_level:
                    out.append(int(v))
            elif isinstance(v, tuple):
                for x in v:
                    out += _all_codes(x)
            elif dataclasses.is_dataclass(v):
                out += _all_codes(v)
    return out


def refused(code: int, top_level: bool = True):
    """Every error code of the response (at least one) is ``code`` (with ``top_level`` False
    the response's own code is left out: Fetch answers 0 there and refuses per partition)."""
    def check(resp):
        codes = _all_codes(resp, top_level)
        return bool(codes) and set(codes) == {code}, codes
    return check


def top(code: int):
    def check(resp):
        return int(resp.error_code) == code, int(resp.error_code)
    return check


def _partition(fields: dict) -> list:
    return [fields]


TXN_FIELDS = {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0}
SWEEP = {
    # api: (highest version to use, request fields, check)
    0: (9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch([b"x"])}]}]},
        refused(TOPIC_AUTHORIZATION_FAILED)),
    1: (12, {"replica_id": -1, "max_wait": 0, "max_bytes": 1 << 20, "isolation_level": 0,
             "topics": [{"topic": TOPIC, "partitions": [
                 {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]},
        refused(TOPIC_AUTHORIZATION_FAILED, top_level=False)),
    2: (7, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
        refused(TOPIC_AUTHORIZATION_FAILED)),
    3: (12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
        lambda r: ([(t.name, int(t.error_code)) for t in r.topics] == [(TOPIC, TOPIC_AUTHORIZATION_FAILED)],
                   [(t.name, int(t.error_code)) for t in r.topics])),
    8: (8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "generation_id": -1,
            "member_id": "", "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]},
        refused(GROUP_AUTHORIZATION_FAILED)),
    9: (7, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        top(GROUP_AUTHORIZATION_FAILED)),
    10: (6, {"key_type": 0, "key": GROUP, "coordinator_keys": [GROUP]},
         refused(GROUP_AUTHORIZATION_FAILED)),
    11: (9, {"group_id": GROUP, "session_timeout": 10000, "rebalance_timeout": 10000,
             "member_id": "", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b""}], "reason": None},
         top(GROUP_AUTHORIZATION_FAILED)),
    12: (4, {"group_id": GROUP, "generation_id": 1, "member_id": "m"}, top(GROUP_AUTHORIZATION_FAILED)),
    13: (5, {"group_id": GROUP, "member_id": "m", "members": [{"member_id": "m", "reason": None}]},
         top(GROUP_AUTHORIZATION_FAILED)),
    14: (5, {"group_id": GROUP, "generation_id": 1, "member_id": "m", "protocol_type": "consumer",
             "protocol_name": "range"}, top(GROUP_AUTHORIZATION_FAILED)),
    15: (5, {"groups": [GROUP]},
         lambda r: ([(g.group_id, int(g.error_code)) for g in r.groups]
                    == [(GROUP, GROUP_AUTHORIZATION_FAILED)], r.groups)),
    16: (4, {"states_filter": []},
         lambda r: (int(r.error_code) == 0 and GROUP not in [g.group_id for g in r.groups],
                    [g.group_id for g in r.groups])),
    17: (1, {"mechanism": "PLAIN"}, top(ILLEGAL_SASL_STATE)),   # a logged-in connection
    18: (3, {"client_software_name": "sweep", "client_software_version": "1"}, top(0)),  # public
    19: (7, {"timeout": 5000, "validate_only": False, "topics": [
        {"name": unique("sweep-new-"), "num_partitions": 1, "replication_factor": 1}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    20: (5, {"timeout": 5000, "topic_names": [TOPIC]}, refused(TOPIC_AUTHORIZATION_FAILED)),
    21: (2, {"timeout": 5000, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "offset": 0}]}]}, refused(TOPIC_AUTHORIZATION_FAILED)),
    22: (5, {"transactional_id": TXN, "transaction_timeout": 60000, "producer_id": -1,
             "producer_epoch": -1}, top(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    24: (3, {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 1,
             "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                 {"name": TOPIC, "partitions": [0]}]},
         refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    25: (4, {**TXN_FIELDS, "group_id": GROUP}, top(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    26: (4, {**TXN_FIELDS, "committed": False}, top(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    27: (1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                          "coordinator_epoch": 0,
                          "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]},
         refused(CLUSTER_AUTHORIZATION_FAILED)),
    28: (3, {**TXN_FIELDS, "group_id": GROUP, "generation_id": -1, "member_id": "",
             "topics": [{"name": TOPIC, "partitions": [
                 {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]},
         refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    29: (3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
         top(CLUSTER_AUTHORIZATION_FAILED)),
    30: (3, {"creations": [{"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3,
                            "principal": "User:alice", "host": "*", "operation": 3,
                            "permission_type": 3}]},
         refused(CLUSTER_AUTHORIZATION_FAILED)),
    31: (3, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                          "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                          "operation": 1, "permission_type": 1}]},
         refused(CLUSTER_AUTHORIZATION_FAILED)),
    32: (4, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    33: (2, {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                            "configs": [{"name": "retention.ms", "value": "1000"}]}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    35: (4, {"topics": None}, top(CLUSTER_AUTHORIZATION_FAILED)),
    36: (2, {"auth_bytes": b"\0alice\0alice-pw"}, top(ILLEGAL_SASL_STATE)),
    37: (3, {"timeout": 5000, "validate_only": False,
             "topics": [{"name": TOPIC, "count": 2, "assignments": None}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    42: (2, {"groups_names": [GROUP]}, refused(GROUP_AUTHORIZATION_FAILED)),
    44: (1, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    47: (0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
         top(GROUP_AUTHORIZATION_FAILED)),
    48: (1, {"components": [], "strict": False}, top(CLUSTER_AUTHORIZATION_FAILED)),
    49: (1, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": "alice"}],
         "ops": [{"key": "consumer_byte_rate", "value": 1e9, "remove": False}]}]},
         refused(CLUSTER_AUTHORIZATION_FAILED)),
    50: (0, {"users": None}, top(CLUSTER_AUTHORIZATION_FAILED)),
    51: (0, {"deletions": [{"name": "bob", "mechanism": 1}]}, refused(CLUSTER_AUTHORIZATION_FAILED)),
    60: (1, {"include_cluster_authorized_operations": True, "endpoint_type": 1},
         # Public as Kafka's (the brokers, as Metadata shows them); no operation is granted.
         lambda r: (int(r.error_code) == 0 and int(r.cluster_authorized_operations) in (0, -2147483648),
                    (int(r.error_code), int(r.cluster_authorized_operations)))),
    61: (0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]},
         refused(TOPIC_AUTHORIZATION_FAILED)),
    65: (0, {"transactional_ids": [TXN]}, refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    66: (1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
         lambda r: (int(r.error_code) == 0 and TXN not in [t.transactional_id for t in r.transaction_states],
                    [t.transactional_id for t in r.transaction_states])),
    75: (0, {"topics": [{"name": TOPIC}], "response_partition_limit": 100, "cursor": None},
         lambda r: ([(t.name, int(t.error_code)) for t in r.topics] == [(TOPIC, TOPIC_AUTHORIZATION_FAILED)],
                    [(t.name, int(t.error_code)) for t in r.topics])),
}


def _advertised(w) -> dict[int, tuple[int, int]]:
    r = w.call(ApiVersionsRequest(client_software_name="sweep", client_software_version="1"))
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}


def _make_hidden_resources(broker):
    """The topic, group and transactional id exist (made by the super user), so a refusal is
    about authorization, not existence."""
    admin = sasl_wire(broker, "admin")
    try:
        for api, version, fields in (
                (19, 7, {"timeout": 5000, "validate_only": False, "topics": [
                    {"name": TOPIC, "num_partitions": 1, "replication_factor": 1}]}),
                (8, 8, SWEEP[8][1]),
                (22, 4, SWEEP[22][1])):
            resp = admin.call(fill(codec.request_class(api, version), fields))
            assert set(_all_codes(resp)) <= {0}, (api, resp)
    finally:
        admin.sock.close()


def test_every_advertised_api_refuses_a_user_without_acls(broker):
    _make_hidden_resources(broker)
    w = sasl_wire(broker, "alice")
    try:
        advertised = _advertised(w)
        missing = sorted(set(advertised) - set(SWEEP))
        assert not missing, f"APIs advertised without an entry in the sweep: {missing}"
        failures = []
        for api, (lo, hi) in sorted(advertised.items()):
            version = max(lo, min(hi, SWEEP[api][0]))
            request = fill(codec.request_class(api, version), SWEEP[api][1])
            try:
                response = w.call(request)
            except ConnectionError:
                w.sock.close()
                w = sasl_wire(broker, "alice")
                failures.append((api, version, "connection closed"))
                continue
            ok, seen = SWEEP[api][2](response)
            if not ok:
                failures.append((api, version, seen))
        assert not failures, failures
    finally:
        w.sock.close()


def test_the_sweep_builder_fills_every_request_it_is_given():
    """The builder itself: every entry makes an encodable request at its version."""
    for api, (version, fields, _check) in SWEEP.items():
        entity = fill(codec.request_class(api, version), fields)
        assert codec.encode_request(entity, 1)
