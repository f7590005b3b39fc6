"""The Spark and log side of loads of many tables (:mod:`pipelines.spec.topic_routing`):
which topics a pattern matches now, a route's rows of one table, and the count of each
route value of a routed pass."""
from __future__ import annotations

from typing import Any, Iterable

from kafkastore.errors import ConfigError
from kafkastore.topics.admin import is_internal_topic

from ..decoding.values import ERROR_COLUMN
from ..spec.route_filter import RouteFilter
from ..spec.topic_routing import compile_topic_pattern
from .executor_io import ROUTE_COLUMN


def matching_topics(pattern: str, topics: Iterable[str]) -> list[str]:
    """The topics whose whole name matches ``pattern`` (Spark's ``subscribePattern``:
    Java's ``Pattern.matcher(name).matches()``), internal topics left out as Kafka's
    consumer does for a pattern subscription, sorted."""

    rx = compile_topic_pattern(pattern)
    return sorted(t for t in topics if rx.fullmatch(t) and not is_internal_topic(t))


def check_column(frame, field: str) -> None:
    if field not in frame.columns:
        raise ConfigError(f"--route-field {field!r} is not a column of the decoded records "
                          f"(columns: {sorted(c for c in frame.columns if not c.startswith('__'))})")


def route_rows(frame, route: RouteFilter):
    """``frame`` (decoded columns and ``__error``) cut to the rows ``route`` takes."""
    from pyspark.sql import functions as F

    check_column(frame, route.field)
    value = F.col(route.field).cast("string")
    listed = value.isNotNull() & value.isin(list(route.values)) & F.col(ERROR_COLUMN).isNull()
    return frame.where(~listed if route.others else listed)


def route_value_counts(routed) -> dict[Any, int]:
    """``{value: records}`` of a routed pass (``(frame, split)`` of
    :func:`pipelines.jobs.write_engine.routed_frame`; None: no records): None counts the
    records whose value is null or that do not decode."""
    if routed is None:
        return {}
    frame, _split = routed
    rows = frame.groupBy(ROUTE_COLUMN).count().collect()
    return {r[ROUTE_COLUMN]: int(r["count"]) for r in rows}
