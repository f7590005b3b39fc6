"""Produce: check each partition's batch where it arrives, queue it, answer after the commit."""
from __future__ import annotations

import asyncio

from . import error_codes as E
from .appender import BatchRejected, Outcome, check_batch
from .codec import make
from .registry import Registry, RequestContext

PRODUCE = 0


async def handle_produce(ctx: RequestContext, request):
    """Every partition's batch is queued before the first ``await`` (keeps arrival order);
    acks=0 gets no response at all, acks=1 / -1 the outcome after the manifest version lands."""
    acks = request.acks
    appender = ctx.broker.appender
    pending: list[tuple[str, list[tuple[int, asyncio.Future | Outcome]]]] = []
    for topic in request.topic_data:
        parts = []
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                parts.append((pd.index, Outcome(E.INVALID_REQUIRED_ACKS)))
                continue
            data = pd.records
            try:
                if not data:
                    raise BatchRejected(E.CORRUPT_MESSAGE, "empty record set")
                header = check_batch(data)
            except BatchRejected as exc:
                parts.append((pd.index, Outcome(exc.code, message=str(exc))))
                continue
            if pd.index < 0:
                parts.append((pd.index, Outcome(E.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            parts.append((pd.index, appender.submit(topic.name, pd.index, bytes(data), header)))
        pending.append((topic.name, parts))
    if acks == 0:
        return None
    mod = ctx.response_module
    responses = []
    for name, parts in pending:
        out = []
        for index, fut in parts:
            outcome = fut if isinstance(fut, Outcome) else await fut
            out.append(make(mod, "PartitionProduceResponse", index=index, error_code=outcome.error,
                            base_offset=outcome.base_offset,
                            log_append_time=outcome.log_append_time,
                            log_start_offset=outcome.log_start_offset, record_errors=(),
                            error_message=outcome.message))
        responses.append(make(mod, "TopicProduceResponse", name=name, partition_responses=tuple(out)))
    return make(ctx.response_class, responses=tuple(responses))


def register(registry: Registry) -> None:
    registry.register(PRODUCE, 3, 11, handle_produce)
