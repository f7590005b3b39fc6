"""ACLs: the model, validation, storage under the root, and the authorizer's decisions
(Kafka's StandardAuthorizer rules), with a property checking the index against a plain scan."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.cluster.acls import (AclBinding, AclFilter, Operation as Op, PatternType as P,
                                     Permission, ResourceType as R, acl_document, add_acls, list_acls,
                                     parse_operation, pattern_matches, remove_acls, validate_binding)
from kafkastore.errors import InvalidAclError
from kafkastore.protocol.authorizer import AclIndex, Authorizer
from kafkastore.storage import Storage

ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(name, op=Op.READ, perm=ALLOW, *, rtype=R.TOPIC, pattern=P.LITERAL, who="User:alice", host="*"):
    return AclBinding(rtype, name, pattern, who, host, op, perm)


def allowed(acls, op, name, *, rtype=R.TOPIC, who="User:alice", host="10.0.0.1", supers=()):
    return AclIndex(acls, supers).authorize(who, host, op, rtype, name)


# -- decisions -----------------------------------------------------------------------------
def test_deny_by_default_and_super_users_bypass():
    assert not allowed([], Op.READ, "t")
    assert allowed([], Op.READ, "t", supers={"User:alice"})
    assert allowed([acl("t", perm=DENY)], Op.READ, "t", supers={"User:alice"})


def test_literal_wildcard_and_prefixed_patterns():
    assert allowed([acl("t")], Op.READ, "t")
    assert not allowed([acl("t")], Op.READ, "t2")
    assert allowed([acl("*")], Op.READ, "anything")
    pre = acl("orders.", pattern=P.PREFIXED)
    assert allowed([pre], Op.READ, "orders.eu") and allowed([pre], Op.READ, "orders.")
    assert not allowed([pre], Op.READ, "orders") and not allowed([pre], Op.READ, "xorders.eu")
    # The resource type is part of the pattern.
    assert not allowed([acl("t")], Op.READ, "t", rtype=R.GROUP)


def test_deny_wins_over_allow_whatever_the_pattern():
    acls = [acl("*", Op.ALL), acl("secret.", Op.READ, DENY, pattern=P.PREFIXED)]
    assert allowed(acls, Op.READ, "public") and not allowed(acls, Op.READ, "secret.x")
    assert allowed(acls, Op.WRITE, "secret.x")  # only READ is denied
    assert not allowed([acl("t"), acl("t", Op.ALL, DENY)], Op.READ, "t")


def test_implied_operations_allow_but_do_not_deny():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("t", op)], Op.DESCRIBE, "t")
    assert not allowed([acl("t", Op.CREATE)], Op.DESCRIBE, "t")
    assert allowed([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, "t")
    assert not allowed([acl("t", Op.DESCRIBE)], Op.READ, "t")
    # Denying READ does not deny DESCRIBE (Kafka: implication is for ALLOW only).
    assert allowed([acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY)], Op.DESCRIBE, "t")


def test_principal_and_host_must_match():
    assert not allowed([acl("t", who="User:bob")], Op.READ, "t")
    assert allowed([acl("t", who="User:*")], Op.READ, "t")
    assert allowed([acl("t", host="10.0.0.1")], Op.READ, "t")
    assert not allowed([acl("t", host="10.0.0.2")], Op.READ, "t")
    assert not allowed([acl("t", Op.READ, DENY, who="User:*"), acl("t")], Op.READ, "t")


def test_authorize_any_as_kafkas_authorize_by_resource_type():
    def any_write(acls):
        return AclIndex(acls).authorize_any("User:alice", "10.0.0.1", Op.WRITE, R.TOPIC)
    assert not any_write([])
    assert any_write([acl("t", Op.WRITE)])
    assert not any_write([acl("t", Op.READ)])
    assert not any_write([acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)])
    assert not any_write([acl("ab", Op.WRITE), acl("a", Op.WRITE, DENY, pattern=P.PREFIXED)])
    assert not any_write([acl("ab", Op.WRITE), acl("*", Op.WRITE, DENY)])
    assert any_write([acl("ab", Op.WRITE), acl("b", Op.WRITE, DENY, pattern=P.PREFIXED)])


# -- the property: the index decides exactly as a scan of every binding does -------------------
NAMES = st.text(alphabet="ab.", min_size=1, max_size=4)
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
OPS = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALTER_CONFIGS,
                       Op.DESCRIBE_CONFIGS, Op.CREATE])
BINDINGS = st.builds(
    AclBinding, st.sampled_from([R.TOPIC, R.GROUP]), NAMES | st.just("*"),
    st.sampled_from([P.LITERAL, P.PREFIXED]), PRINCIPALS, st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    OPS, st.sampled_from([ALLOW, DENY])).filter(lambda b: not (b.pattern == P.PREFIXED and b.name == "*"))


def reference(acls, principal, host, op, rtype, name) -> bool:
    """Kafka's rule read literally: any applying DENY of op or ALL denies; then an applying ALLOW
    of op, ALL or an operation implying op allows."""
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(op, set())
    applying = [b for b in acls if b.resource_type == rtype and pattern_matches(b.pattern, b.name, name)
                and b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission == DENY and b.operation in (op, Op.ALL) for b in applying):
        return False
    return any(b.permission == ALLOW and b.operation in ({op, Op.ALL} | implied) for b in applying)


@settings(max_examples=300, deadline=None)
@given(st.lists(BINDINGS, max_size=12), st.sampled_from(["User:alice", "User:bob"]),
       st.sampled_from(["10.0.0.1", "10.0.0.2"]), OPS.filter(lambda o: o != Op.ALL),
       st.sampled_from([R.TOPIC, R.GROUP]), NAMES)
def test_index_decides_as_a_scan_of_every_binding(acls, principal, host, op, rtype, name):
    index = AclIndex(acls)
    expected = reference(acls, principal, host, op, rtype, name)
    assert index.authorize(principal, host, op, rtype, name) == expected
    assert index.authorize(principal, host, op, rtype, name) == expected  # the cached answer too
    # Deny wins: adding a DENY of the operation for everyone, anywhere, forbids it.
    deny_all = acl(name, op, DENY, rtype=rtype, who="User:*")
    assert not AclIndex(acls + [deny_all]).authorize(principal, host, op, rtype, name)


@settings(max_examples=200, deadline=None)
@given(NAMES, NAMES)
def test_prefixed_matches_exactly_the_names_with_that_prefix(prefix, name):
    index = AclIndex([acl(prefix, pattern=P.PREFIXED)])
    assert index.authorize("User:alice", "10.0.0.1", Op.READ, R.TOPIC, name) == name.startswith(prefix)


# -- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad, message", [
    (acl("t", rtype=R.ANY), "resource type"),
    (acl("t", rtype=R.UNKNOWN), "resource type"),
    (acl("t", pattern=P.MATCH), "pattern type"),
    (acl("t", pattern=P.ANY), "pattern type"),
    (acl("t", Op.ANY), "operation"),
    (acl("t", perm=Permission.ANY), "permission"),
    (acl("", ), "empty"),
    (acl("x", rtype=R.CLUSTER), "kafka-cluster"),
    (acl("t", who="alice"), "principal"),
    (acl("t", who="User:"), "principal"),
    (acl("t", host="example.com"), "host"),
    (acl("bad/name"), "topic name"),
    (acl("*", pattern=P.PREFIXED), "PREFIXED"),
    (AclBinding(9, "t", P.LITERAL, "User:a", "*", Op.READ, ALLOW), "resource type"),
])
def test_invalid_bindings_are_refused_with_the_reason(bad, message):
    with pytest.raises(InvalidAclError, match=message):
        validate_binding(bad)


def test_valid_bindings_are_normalised():
    b = validate_binding(AclBinding(2, "t", 4, "User:alice", "::1", 3, 3))
    assert b == acl("t", pattern=P.PREFIXED, host="::1") and isinstance(b.operation, Op)
    assert validate_binding(acl("kafka-cluster", Op.ALTER, rtype=R.CLUSTER)).name == "kafka-cluster"


def test_parse_operation_takes_kafkas_names():
    assert parse_operation("Read") is Op.READ
    assert parse_operation("DescribeConfigs") is Op.DESCRIBE_CONFIGS
    assert parse_operation("idempotent-write") is Op.IDEMPOTENT_WRITE
    assert parse_operation("ALL") is Op.ALL
    with pytest.raises(InvalidAclError, match="expected one of"):
        parse_operation("Any")


def test_filters_match_as_kafkas():
    t, pre = acl("orders"), acl("ord", pattern=P.PREFIXED)
    assert AclFilter().matches(t) and AclFilter().matches(pre)
    assert AclFilter(name="orders").matches(t) and not AclFilter(name="orders").matches(pre)
    assert AclFilter(pattern=P.MATCH, name="orders").matches(pre)
    assert not AclFilter(pattern=P.PREFIXED).matches(t)
    assert not AclFilter(resource_type=R.GROUP).matches(t)
    assert AclFilter(principal="User:alice", operation=Op.READ, permission=ALLOW).matches(t)
    assert not AclFilter(host="10.0.0.1").matches(t)


# -- storage and the broker's authorizer -------------------------------------------------------
def test_acls_are_stored_under_the_root_and_seen_by_another_reader(tmp_path):
    root = Storage("file://" + str(tmp_path))
    doc = acl_document(root)
    add_acls(doc, [acl("t"), acl("t")])  # twice: stored once
    add_acls(doc, [acl("g", rtype=R.GROUP)])
    other = acl_document(Storage("file://" + str(tmp_path)))
    assert list_acls(other) == sorted([acl("t"), acl("g", rtype=R.GROUP)])
    removed = remove_acls(other, [AclFilter(resource_type=R.GROUP), AclFilter(name="nothing")])
    assert removed == [[acl("g", rtype=R.GROUP)], []]
    assert list_acls(doc) == [acl("t")]
    with pytest.raises(InvalidAclError):
        add_acls(doc, [acl("t", host="nowhere")])


def test_authorizer_refreshes_in_the_background_after_max_age(tmp_path):
    now = [0.0]
    submitted = []
    doc = acl_document(Storage("file://" + str(tmp_path)))
    authz = Authorizer(doc, submit=submitted.append, max_age_s=2.0, clock=lambda: now[0])
    authz.load()
    assert not authz.authorize("User:alice", "1.2.3.4", Op.READ, R.TOPIC, "t")
    add_acls(acl_document(Storage("file://" + str(tmp_path))), [acl("t")])  # another broker
    now[0] = 1.0
    assert not authz.authorize("User:alice", "1.2.3.4", Op.READ, R.TOPIC, "t") and not submitted
    now[0] = 2.5
    assert not authz.authorize("User:alice", "1.2.3.4", Op.READ, R.TOPIC, "t")  # never blocks
    assert len(submitted) == 1
    authz.authorize("User:alice", "1.2.3.4", Op.READ, R.TOPIC, "t")
    assert len(submitted) == 1  # one refresh at a time
    submitted[0]()  # the pool runs it
    assert authz.authorize("User:alice", "1.2.3.4", Op.READ, R.TOPIC, "t")
