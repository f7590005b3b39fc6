"""CreateAcls, DescribeAcls, DeleteAcls: the root's ACLs over the admin API (Kafka's AclApis).

Without ``--authorizer`` every request is answered SECURITY_DISABLED, as a Kafka
broker with no authorizer answers. Creating or deleting needs ALTER on the
cluster, describing DESCRIBE on it (else CLUSTER_AUTHORIZATION_FAILED). A
binding or filter Kafka would refuse (an unknown or ANY resource type, pattern,
operation or permission in a binding, a CLUSTER name other than
``kafka-cluster``, an empty name, a principal without ``Type:``, a host that is
neither ``*`` nor an IP address) is answered INVALID_REQUEST with the reason,
and the others of the request still apply. A change applies on this broker at
once, on every other broker of the root within its ``acl_max_age_s``.
"""
from __future__ import annotations

import logging

from ...cluster.acls import (AclBinding, AclFilter, Operation, ResourceType, add_acls, list_acls,
                             remove_acls, validate_binding, validate_filter)
from ...errors import InvalidAclError, KafkaStoreError
from ..wire import error_codes as E
from ..wire.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from ..wire.error_codes import SECURITY_DISABLED
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.acls")

_DISABLED_MESSAGE = "no authorizer is configured on the broker (kafkastore serve --authorizer)"


def _changed(authorizer, fn, *args):
    """Run a change of the ACL document and use its result here at once. Blocking."""
    out = fn(authorizer.document, *args)
    authorizer.use(authorizer.document.version, authorizer.document.get())
    return out


def _refusal(ctx: RequestContext, op: Operation) -> tuple[int, str | None] | None:
    """Why an ACL request is refused as a whole (no authorizer, or the caller may not ``op`` the
    cluster): (error code, message); None when it may go on."""
    if ctx.broker.authorizer is None:
        return SECURITY_DISABLED, _DISABLED_MESSAGE
    if not ctx.authorize(op, ResourceType.CLUSTER):
        return E.CLUSTER_AUTHORIZATION_FAILED, None
    return None


async def handle_create_acls(ctx: RequestContext, request):
    mod = ctx.response_module
    authorizer = ctx.broker.authorizer

    def result(code, message=None):
        return make(mod, "AclCreationResult", error_code=code, error_message=message)

    refused = _refusal(ctx, Operation.ALTER)
    if refused:
        return make(ctx.response_class, throttle_time=0, results=tuple(
            result(*refused) for _ in request.creations))
    outcomes: list = []
    valid: list[AclBinding] = []
    for c in request.creations:
        try:
            b = validate_binding(AclBinding(
                c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", 3),
                c.principal, c.host, c.operation, c.permission_type))
        except InvalidAclError as exc:
            outcomes.append((E.INVALID_REQUEST, str(exc)))
            continue
        valid.append(b)
        outcomes.append(None)
    if valid:
        try:
            await ctx.run(_changed, authorizer, add_acls, valid)
            log.info("ACLs created by %s: %s", ctx.connection and ctx.connection.principal,
                     "; ".join(b.describe() for b in valid))
        except KafkaStoreError as exc:
            log.warning("creating ACLs failed: %s", exc)
            outcomes = [o or (E.UNKNOWN_SERVER_ERROR, f"storing the ACLs failed: {exc}")
                        for o in outcomes]
    return make(ctx.response_class, throttle_time=0, results=tuple(
        result(*(o or (E.NONE, None))) for o in outcomes))


def _filter(f) -> AclFilter:
    return validate_filter(AclFilter(
        f.resource_type_filter, f.resource_name_filter, getattr(f, "pattern_type_filter", 3),
        f.principal_filter, f.host_filter, f.operation, f.permission_type))


async def handle_describe_acls(ctx: RequestContext, request):
    authorizer = ctx.broker.authorizer

    def fail(code, message=None):
        return make(ctx.response_class, throttle_time=0, error_code=code, error_message=message,
                    resources=())

    refused = _refusal(ctx, Operation.DESCRIBE)
    if refused:
        return fail(*refused)
    try:
        flt = _filter(request)
    except InvalidAclError as exc:
        return fail(E.INVALID_REQUEST, str(exc))
    try:
        found = await ctx.run(list_acls, authorizer.document, flt)
    except KafkaStoreError as exc:
        return fail(E.UNKNOWN_SERVER_ERROR, f"reading the ACLs failed: {exc}")
    mod = ctx.response_module
    by_resource: dict[tuple, list] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.name, b.pattern), []).append(
            make(mod, "AclDescription", principal=b.principal, host=b.host, operation=b.operation,
                 permission_type=b.permission))
    return make(ctx.response_class, throttle_time=0, error_code=E.NONE, error_message=None,
                resources=tuple(make(mod, "DescribeAclsResource", resource_type=t, resource_name=n,
                                     pattern_type=p, acls=tuple(acls))
                                for (t, n, p), acls in by_resource.items()))


async def handle_delete_acls(ctx: RequestContext, request):
    mod = ctx.response_module
    authorizer = ctx.broker.authorizer

    def result(code, message=None, matching=()):
        return make(mod, "DeleteAclsFilterResult", error_code=code, error_message=message,
                    matching_acls=tuple(matching))

    refused = _refusal(ctx, Operation.ALTER)
    if refused:
        return make(ctx.response_class, throttle_time=0, filter_results=tuple(
            result(*refused) for _ in request.filters))
    filters: list = []
    for f in request.filters:
        try:
            filters.append(_filter(f))
        except InvalidAclError as exc:
            filters.append(exc)
    valid = [f for f in filters if isinstance(f, AclFilter)]
    removed: list = []
    error = None
    if valid:
        try:
            removed = await ctx.run(_changed, authorizer, remove_acls, valid)
        except KafkaStoreError as exc:
            log.warning("deleting ACLs failed: %s", exc)
            error = f"storing the ACLs failed: {exc}"
    out, found = [], iter(removed)
    for f in filters:
        if isinstance(f, InvalidAclError):
            out.append(result(E.INVALID_REQUEST, str(f)))
        elif error is not None:
            out.append(result(E.UNKNOWN_SERVER_ERROR, error))
        else:
            out.append(result(E.NONE, None, (
                make(mod, "DeleteAclsMatchingAcl", error_code=E.NONE, error_message=None,
                     resource_type=b.resource_type, resource_name=b.name, pattern_type=b.pattern,
                     principal=b.principal, host=b.host, operation=b.operation,
                     permission_type=b.permission) for b in next(found))))
    return make(ctx.response_class, throttle_time=0, filter_results=tuple(out))


def register(registry: HandlerTable) -> None:
    registry.serve(DESCRIBE_ACLS, handle_describe_acls)
    registry.serve(CREATE_ACLS, handle_create_acls)
    registry.serve(DELETE_ACLS, handle_delete_acls)
