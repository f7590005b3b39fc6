"""Which records of a route-by-field load one table takes (:mod:`pipelines.spec.topic_routing`).

A :class:`RouteFilter` rides on the table's :class:`~pipelines.spec.load_spec.LoadSpec`
(``spec.route``) and the write engine applies it to the decoded frame
(:func:`pipelines.jobs.routing.route_rows`), so a table's
files hold only its rows while its snapshot records the whole offset range (each table
carries its own offsets: exactly once per table).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouteFilter:
    """Rows whose ``field`` (as a string) is one of ``values``; with ``others``, the rows
    no listed value takes instead: a null or undecodable value, or any other value
    (decode failures, the dead letters, go with these)."""

    field: str
    values: tuple[str, ...]
    others: bool = False
