"""The Spark and log side of loads of many tables (:mod:`pipelines.spec.topic_routing`):
which topics a pattern matches now, and a route's rows of one table."""
from __future__ import annotations

from typing import Iterable

from kafkastore.errors import ConfigError
from kafkastore.topics.admin import is_internal_topic

from ..decoding.values import ERROR_COLUMN
from ..spec.route_filter import RouteFilter
from ..spec.topic_routing import compile_topic_pattern


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
