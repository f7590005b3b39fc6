"""What a snapshot brought, for the quality gate (:mod:`pipelines.quality`): the offset
ranges its summary lists (:func:`snapshot_ranges`), and its rows and dead letters in
those ranges, read from that snapshot, as the frames the checks run on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping


from ..warehouse.properties import OPERATION_KEY, OPERATIONS, RANGES_KEY, RUN_ID_KEY
from ..warehouse.reads import range_filter, read_snapshot
from ..warehouse.snapshots import main_ancestry, summary_of

_KEY_PRESENT = "present"
_COLUMNS = ("topic", "partition", "offset", "timestamp", "key")


# ---------------------------------------------------------------------------
# what a snapshot brought


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    until: int


def snapshot_ranges(summary: Mapping[str, str]) -> list[Range]:
    """The half-open offset ranges a kafkastore snapshot covers (its summary's
    ``kafkastore.ranges``: ``{"<topic>": {"<partition>": [from, until]}}``)."""
    raw = summary.get(RANGES_KEY)
    if raw is None:
        return []
    data = json.loads(raw) if isinstance(raw, str) else raw
    out = []
    if isinstance(data, dict):
        for topic, parts in data.items():
            for p, bounds in parts.items():
                start, until = _bounds(bounds)
                out.append(Range(topic, int(p), start, until))
    else:   # a list of {"topic", "partition", "from", "until"}
        for r in data:
            out.append(Range(r["topic"], int(r["partition"]), int(r["from"]), int(r["until"])))
    return sorted(out, key=lambda r: (r.topic, r.partition))


def _bounds(b) -> tuple[int, int]:
    if isinstance(b, dict):
        return int(b["from"]), int(b["until"])
    return int(b[0]), int(b[1])


def is_kafkastore(summary: Mapping[str, str]) -> bool:
    return summary.get(OPERATION_KEY) in OPERATIONS


def _dead_letter_snapshot(dl_table, run_id: str | None):
    """The newest snapshot of the dead-letter table written by ``run_id`` (else its
    current one: a run without dead letters may not commit there)."""
    if dl_table is None:
        return None
    if run_id:
        for snap in main_ancestry(dl_table):
            if summary_of(snap).get(RUN_ID_KEY) == run_id:
                return snap
    return dl_table.current_snapshot()


def read_rows(table, dl_table, snapshot, ranges: list[Range]):
    """pyarrow Table of topic, partition, offset, timestamp_ms, key, dead_letter:
    the rows of ``snapshot`` (and its dead letters) inside ``ranges``."""
    import pyarrow as pa

    if not ranges:
        return pa.table(_empty_columns())
    expr = range_filter((r.topic, r.partition, r.start, r.until) for r in ranges)
    parts = [_narrow(read_snapshot(table, snapshot, expr, _COLUMNS), "data")]
    run_id = summary_of(snapshot).get(RUN_ID_KEY)
    dl_snap = _dead_letter_snapshot(dl_table, run_id)
    if dl_snap is not None:
        parts.append(_narrow(read_snapshot(dl_table, dl_snap, expr, _COLUMNS), "dead_letter"))
    return pa.concat_tables(parts)


def _empty_columns():
    import pyarrow as pa

    return {"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
            "offset": pa.array([], pa.int64()), "timestamp_ms": pa.array([], pa.int64()),
            "key": pa.array([], pa.string()), "dead_letter": pa.array([], pa.int8())}


def _narrow(tbl, kind: str):
    """Kafka columns -> the frame the checks read (no payload kept)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = tbl.num_rows
    if "key" in tbl.column_names:
        key = pc.if_else(pc.is_valid(tbl.column("key")), pa.scalar(_KEY_PRESENT),
                         pa.scalar(None, pa.string()))
    else:
        key = pa.nulls(n, pa.string())
    if "timestamp" in tbl.column_names:
        ts = pc.cast(pc.cast(tbl.column("timestamp"), pa.timestamp("ms", tz="UTC")), pa.int64())
    else:
        ts = pa.nulls(n, pa.int64())
    return pa.table({
        "topic": pc.cast(tbl.column("topic"), pa.string()),
        "partition": pc.cast(tbl.column("partition"), pa.int32()),
        "offset": pc.cast(tbl.column("offset"), pa.int64()),
        "timestamp_ms": pc.cast(ts, pa.int64()),
        "key": key,
        "dead_letter": pa.array([1 if kind == "dead_letter" else 0] * n, pa.int8()),
    })


def check_frames(ranges: list[Range], rows, added_records: int | None):
    """(row frame, partition frame) as pandas DataFrames."""
    import pandas as pd

    df = rows.to_pandas()
    counts = df.groupby(["topic", "partition"]).agg(
        rows=("offset", "size"), dead_letters=("dead_letter", "sum")).to_dict("index")
    parts = pd.DataFrame([{
        "topic": r.topic, "partition": r.partition, "range_from": r.start,
        "range_until": r.until, "expected_rows": r.until - r.start,
        "rows": int(counts.get((r.topic, r.partition), {}).get("rows", 0)),
        "dead_letters": int(counts.get((r.topic, r.partition), {}).get("dead_letters", 0)),
    } for r in ranges], columns=["topic", "partition", "range_from", "range_until",
                                 "expected_rows", "rows", "dead_letters"])
    totals = pd.DataFrame([{"data_rows": int((df["dead_letter"] == 0).sum()) if len(df) else 0,
                            "added_records": added_records}])
    return df, parts, totals
