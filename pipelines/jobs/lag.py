"""Committed offsets and lag of the Iceberg warehouse tables that load a topic.

For ``kafkastore offsets T --warehouse URL`` and the retention job: every table
of the warehouse whose committed offsets (the ``kafkastore.offsets`` of the
newest snapshot of main carrying them, :func:`pipelines.warehouse.offsets.committed_offsets`)
name topic ``T`` is reported, per partition, with its committed next offset
and its lag (``high_watermark - committed``: records and markers the next load
would read at most). A partition the table never loaded reports ``committed:
null`` and the lag of a first load (from the log start). ``lost`` counts
offsets retention deleted before the table loaded them (``log_start_offset -
committed`` when positive): a load fails on those unless told to skip them.
Spark-free; a warehouse that does not exist has no tables (nothing is created).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..warehouse.catalog import Warehouse
from ..warehouse.offsets import committed_offsets


def committed_offsets_by_table(warehouse, topic: str, storage_options: dict | None = None,
                               catalog: Mapping[str, Any] | None = None
                               ) -> dict[str, dict[int, int]]:
    """``{table: {partition: next offset to load}}`` for every table that loads ``topic``."""
    wh = Warehouse.of(warehouse, catalog, storage_options)
    out: dict[str, dict[int, int]] = {}
    for name in wh.list_tables():
        offsets = committed_offsets(wh.load_table(name))
        mine = {p: n for (t, p), n in offsets.items() if t == topic}
        if mine:
            out[name] = mine
    return out


def table_lag(warehouse, topic: str, partitions_json: Mapping[str, Mapping[str, int]],
              storage_options: dict | None = None,
              catalog: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per table loading ``topic``: committed offset, lag and lost offsets per partition.

    ``partitions_json`` is the ``offsets`` command's ``{"0": {"log_start_offset": a,
    "high_watermark": b}, ...}``. Returns ``{table: {"partitions": {"0": {"committed":
    c, "lag": n, "lost": k}}, "lag": total}}``.
    """
    result: dict[str, Any] = {}
    for name, committed in sorted(committed_offsets_by_table(warehouse, topic, storage_options,
                                                             catalog).items()):
        parts: dict[str, Any] = {}
        total = 0
        for key, offs in sorted(partitions_json.items(), key=lambda kv: int(kv[0])):
            start, hw = int(offs["log_start_offset"]), int(offs["high_watermark"])
            c = committed.get(int(key))
            lag = hw - (start if c is None else max(c, start))
            parts[key] = {"committed": c, "lag": max(0, lag),
                          "lost": 0 if c is None else max(0, start - c)}
            total += max(0, lag)
        result[name] = {"partitions": parts, "lag": total}
    return result
