"""Delta manifest versions: the structural diff between two manifests, and its inverse.

A stored manifest version (format 2) is either *full* (the whole snapshot, as
:meth:`kafkastore.manifest.model.Manifest.to_dict` writes it) or a *delta* on the
version before it::

    {"format": 2, "kind": "delta", "topic": ..., "partition": ..., "version": N,
     "base_version": N-1, "commit": {...},
     "changes": {"segments_removed": [ids], "segments_added": [entries],
                 "set": {"log_start_offset": ..., ...},
                 "producers_set": {"<pid>": state}, "producers_removed": [pids],
                 "extra_set": {key: value}, "extra_removed": [keys]},
     "result": {"version": N, "high_watermark": ..., "log_start_offset": ...,
                "segments": <count>, "last_segment": <id or null>, "producers": <count>}}

The diff is generic (it compares the two manifests field by field, not the
updates that made them), so a new :class:`~kafkastore.manifest.updates.Update` type
needs nothing here. Empty change groups are left out, so a produce commit's
delta holds its new segment, its producer's state and the commit record:
a few hundred bytes however many segments are live. ``result`` is a cheap
summary of the state the delta must produce; :func:`apply_delta` compares it,
so applying a delta to the wrong base is :class:`CorruptMetadataError`, not
silently wrong state.

Everything here is pure.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from . import model as _m
from ..errors import CorruptMetadataError, InvalidUpdateError

FORMAT = 2
KIND_FULL = "full"
KIND_DELTA = "delta"

#: The manifest's JSON scalars, which a delta carries in ``changes.set`` when they changed: every
#: field of :attr:`Manifest.FIELDS <kafkastore.manifest.model.Manifest.FIELDS>` that is not the
#: delta's own identity, a structured field diffed by parts below, or derived.
SCALAR_FIELDS = tuple(f for f in _m.Manifest.FIELDS
                      if not (f.identity or f.structured or f.derived))
_SCALAR_BY_KEY = {f.key: f for f in SCALAR_FIELDS}
#: The scalars this code writes: not one whose format is not written yet.
_WRITTEN_SCALARS = tuple(f for f in SCALAR_FIELDS if f.since <= _m.MANIFEST_FORMAT)


def summary(m: "_m.Manifest") -> dict[str, Any]:
    """The ``result`` a delta stores: enough to catch a delta applied to the wrong base."""
    return {"version": m.version, "high_watermark": m.high_watermark,
            "log_start_offset": m.log_start_offset, "segments": len(m.segments),
            "last_segment": m.segments[-1].segment_id if m.segments else None,
            "producers": len(m.producers)}


def _segment_changes(old: tuple, new: tuple) -> tuple[list[str], list]:
    """(ids removed, entries added) turning ``old`` into ``new``; entries are compared whole,
    so an entry whose id stayed but whose fields changed is removed and added again."""
    n_old, n_new = len(old), len(new)
    # Fast path (every produce commit): new = old + appended. Tuple comparison checks identity
    # first, and apply() shares the base's entry objects, so this is a C-speed pointer walk.
    if n_new >= n_old and new[:n_old] == old:
        return [], list(new[n_old:])
    lim = min(n_old, n_new)
    p = 0
    # Identity first: apply() shares the base's entry objects, and a dataclass == compares
    # every field (a merge in the middle of thousands of segments walks them all).
    while p < lim and (old[p] is new[p] or old[p] == new[p]):
        p += 1
    s = 0
    while s < lim - p and (old[n_old - 1 - s] is new[n_new - 1 - s]
                           or old[n_old - 1 - s] == new[n_new - 1 - s]):
        s += 1
    old_mid, new_mid = old[p:n_old - s], new[p:n_new - s]
    new_by_id = {e.segment_id: e for e in new_mid}
    old_by_id = {e.segment_id: e for e in old_mid}
    removed = [e.segment_id for e in old_mid if new_by_id.get(e.segment_id) != e]
    added = [e for e in new_mid if old_by_id.get(e.segment_id) != e]
    return removed, added


def changes(base: "_m.Manifest", new: "_m.Manifest") -> dict[str, Any]:
    """The JSON-ready structural diff from ``base`` to ``new`` (empty groups left out)."""
    out: dict[str, Any] = {}
    removed, added = _segment_changes(base.segments, new.segments)
    if removed:
        out["segments_removed"] = removed
    if added:
        out["segments_added"] = [e.to_dict() for e in added]
    scalars = {f.key: f.encode(v) if f.encode is not None else v
               for f in _WRITTEN_SCALARS if (v := getattr(new, f.name)) != getattr(base, f.name)}
    if scalars:
        out["set"] = scalars
    if new.producers is not base.producers:
        old_p, new_p = base.producers, new.producers
        changed = {str(pid): st.to_dict() for pid, st in new_p.items()
                   if (o := old_p.get(pid)) is not st and o != st}
        gone = sorted(old_p.keys() - new_p.keys())
        if changed:
            out["producers_set"] = changed
        if gone:
            out["producers_removed"] = gone
    if new.extra is not base.extra and new.extra != base.extra:
        old_e, new_e = base.extra, new.extra
        changed_e = {k: v for k, v in new_e.items() if k not in old_e or old_e[k] != v}
        gone_e = sorted(old_e.keys() - new_e.keys())
        if changed_e:
            out["extra_set"] = changed_e
        if gone_e:
            out["extra_removed"] = gone_e
    return out


def delta_dict(base: "_m.Manifest", new: "_m.Manifest") -> dict[str, Any]:
    """The stored form of ``new`` as a delta on ``base`` (``new.version`` must be ``base.version + 1``)."""
    if new.version != base.version + 1 or (new.topic, new.partition) != (base.topic, base.partition):
        raise InvalidUpdateError(f"version {new.version} of {new.topic}/{new.partition} is not the "
                                 f"successor of version {base.version} of {base.topic}/{base.partition}")
    return {"format": FORMAT, "kind": KIND_DELTA, "topic": new.topic, "partition": new.partition,
            "version": new.version, "base_version": base.version,
            "commit": new.commit.to_dict() if new.commit else None,
            "changes": changes(base, new), "result": summary(new)}


def encode(d: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, as every manifest version is stored."""
    return json.dumps(d, separators=(",", ":"), allow_nan=False).encode()


def apply_delta(base: "_m.Manifest", d: Mapping[str, Any]) -> "_m.Manifest":
    """The manifest the delta ``d`` makes of ``base``; :class:`CorruptMetadataError` if ``d`` is
    malformed, is not a delta on ``base``, breaks an invariant, or does not produce its ``result``."""
    try:
        if d.get("kind") != KIND_DELTA or d.get("format") != FORMAT:
            raise CorruptMetadataError(f"not a delta version (format {d.get('format')!r}, "
                                       f"kind {d.get('kind')!r})")
        if (d["topic"], d["partition"]) != (base.topic, base.partition):
            raise CorruptMetadataError(f"delta is for {d['topic']}/{d['partition']}")
        if d["base_version"] != base.version or d["version"] != base.version + 1:
            raise CorruptMetadataError(f"delta of version {d['version']} on version {d['base_version']} "
                                       f"applied to version {base.version}")
        ch = d["changes"]
        if not isinstance(ch, Mapping):
            raise CorruptMetadataError("delta changes are not an object")
        segs = base.segments
        removed = ch.get("segments_removed") or ()
        if removed:
            gone = set(removed)
            kept = tuple(e for e in segs if e.segment_id not in gone)
            if len(kept) != len(segs) - len(gone):
                raise CorruptMetadataError(f"delta removes segments {sorted(gone)} of which some are "
                                           f"not in version {base.version}")
            segs = kept
        added = tuple(_m.SegmentEntry.from_dict(e) for e in ch.get("segments_added") or ())
        if added:
            if not segs or added[0].base_offset >= segs[-1].base_offset:
                segs = segs + added
            else:  # entries tile the offsets, so base offsets are unique and order them
                segs = tuple(sorted(segs + added, key=lambda e: e.base_offset))
        fields: dict[str, Any] = {}
        for key, value in (ch.get("set") or {}).items():
            f = _SCALAR_BY_KEY.get(key)
            if f is None:
                raise CorruptMetadataError(f"delta sets unknown field {key!r}")
            fields[f.name] = f.decode(value) if f.decode is not None else value
        producers = base.producers
        if ch.get("producers_set") or ch.get("producers_removed"):
            producers = dict(producers)
            for pid in ch.get("producers_removed") or ():
                producers.pop(int(pid), None)
            for pid, st in (ch.get("producers_set") or {}).items():
                producers[int(pid)] = _m.ProducerState.from_dict(st)
        extra = base.extra
        if ch.get("extra_set") or ch.get("extra_removed"):
            extra = dict(extra)
            for k in ch.get("extra_removed") or ():
                extra.pop(k, None)
            extra.update(ch.get("extra_set") or {})
        commit = _m.CommitInfo.from_dict(d["commit"]) if d.get("commit") else None
        new = _m.Manifest(topic=base.topic, partition=base.partition, version=d["version"],
                          segments=segs, producers=producers, extra=extra, commit=commit,
                          **{f.name: fields.get(f.name, getattr(base, f.name))
                             for f in SCALAR_FIELDS})
        expected = d["result"]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptMetadataError(f"bad delta: {exc!r}") from None
    try:
        _m.check_invariants(new, base)
    except InvalidUpdateError as exc:
        raise CorruptMetadataError(f"delta breaks an invariant: {exc}") from None
    got = summary(new)
    if got != expected:
        raise CorruptMetadataError(f"delta result {got} does not match the stored {expected}")
    return new
