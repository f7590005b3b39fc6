"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over the root's SCRAM
users (:mod:`kafkastore.scram_users`)."""
from __future__ import annotations

import logging

from ...cluster.acls import Operation, ResourceType
from ...errors import KafkaStoreError, ScramCredentialError
from ...cluster.scram import MECHANISMS, Deletion, ScramUsers, Upsertion
from ..wire import error_codes as E
from ..wire.api_keys import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.admin")

_CODES = {"mechanism": E.UNSUPPORTED_SASL_MECHANISM, "unacceptable": E.UNACCEPTABLE_CREDENTIAL,
          "not_found": E.RESOURCE_NOT_FOUND, "duplicate": E.DUPLICATE_RESOURCE}


def scram_users(broker) -> ScramUsers:
    """The broker's view of the root's SCRAM users (made on first use, shared by SASL)."""
    services = broker.services
    if services.scram_users is None:
        services.scram_users = ScramUsers(broker.storage)
    return services.scram_users


def error_code(exc: ScramCredentialError) -> int:
    """Kafka's error code for a refused credential change."""
    return _CODES.get(exc.kind, E.UNACCEPTABLE_CREDENTIAL)


async def handle_describe(ctx: RequestContext, request):
    mod = ctx.response_module
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER):  # as Kafka: DESCRIBE on the cluster
        # Kafka's error response: the code and a message at the top and for each user asked
        # about (librdkafka crashes on a null top-level message).
        msg = "Cluster authorization failed."
        return make(ctx.response_class, error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=msg,
                    results=tuple(make(mod, "DescribeUserScramCredentialsResult", user=u.name,
                                       error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=msg,
                                       credential_infos=()) for u in request.users or ()))
    try:
        known = await ctx.run(scram_users(ctx.broker).describe, True)
    except KafkaStoreError as exc:
        log.warning("describing SCRAM users failed: %s", exc)
        return make(ctx.response_class, error_code=E.KAFKA_STORAGE_ERROR, error_message=str(exc),
                    results=())
    if request.users is None or not request.users:  # null or empty: every user (as Kafka)
        names, dups = list(known), set()
    else:
        names = [u.name for u in request.users]
        dups = {n for n in names if names.count(n) > 1}
        names = list(dict.fromkeys(names))
    results = []
    for name in names:
        if name in dups:
            err, msg, infos = (E.DUPLICATE_RESOURCE, "cannot describe SCRAM credentials for the same "
                               "user twice in a single request", ())
        elif name not in known:
            err, msg, infos = E.RESOURCE_NOT_FOUND, "attempt to describe a user credential that does not exist", ()
        else:
            err, msg = E.NONE, None
            infos = tuple(make(mod, "CredentialInfo", mechanism=MECHANISMS[m][1], iterations=it)
                          for m, it in known[name].items())
        results.append(make(mod, "DescribeUserScramCredentialsResult", user=name, error_code=err,
                            error_message=msg, credential_infos=infos))
    return make(ctx.response_class, error_code=E.NONE, error_message=None, results=tuple(results))


async def handle_alter(ctx: RequestContext, request):
    mod = ctx.response_module
    deletions = [Deletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in request.upsertions]
    users = list(dict.fromkeys(op.user for op in deletions + upsertions))
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER):  # as Kafka: ALTER on the cluster
        return make(ctx.response_class, results=tuple(
            make(mod, "AlterUserScramCredentialsResult", user=u, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None) for u in users))
    try:
        outcome = await ctx.run(scram_users(ctx.broker).alter, deletions, upsertions)
    except KafkaStoreError as exc:
        log.warning("altering SCRAM users failed: %s", exc)
        outcome = {u: exc for u in users}
    results = []
    for user in users:
        exc = outcome.get(user)
        if exc is None:
            err, msg = E.NONE, None
        elif isinstance(exc, ScramCredentialError):
            err, msg = error_code(exc), str(exc)
        else:
            err, msg = E.KAFKA_STORAGE_ERROR, str(exc)
        results.append(make(mod, "AlterUserScramCredentialsResult", user=user, error_code=err,
                            error_message=msg))
    return make(ctx.response_class, results=tuple(results))


def register(registry: HandlerTable) -> None:
    registry.serve(DESCRIBE_USER_SCRAM_CREDENTIALS, handle_describe)
    registry.serve(ALTER_USER_SCRAM_CREDENTIALS, handle_alter)
