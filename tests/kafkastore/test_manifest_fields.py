"""The manifest's stored JSON, declared once per type (``FIELDS`` in kafkastore/manifest/model.py):
the bytes stay those older code wrote, every reader follows the declaration, and the
rolling-upgrade rules of docs/DESIGN.md section 3 hold for every declared field.

The golden fixtures in data/manifest/ were written by the code before the declaration and
are never regenerated. A new field changes what this code writes for them unless it is
``omit_if_default`` (then a version without it keeps its bytes); a field that is not must
say so here, in a new fixture written by the new code, beside the old ones."""
from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkastore.manifest import (MANIFEST_FORMAT, READABLE_FORMATS, BatchMetadata, CommitInfo, CorruptMetadataError,
                                 Manifest, ProducerState, SegmentEntry, delta)
from kafkastore.manifest.model import MUST_NOT_DROP, OPTIONAL, REQUIRED, Field, stored_as_json
from kafkastore.read import verify

DATA = pathlib.Path(__file__).parent / "data" / "manifest"
TYPES = (SegmentEntry, BatchMetadata, ProducerState, CommitInfo, Manifest)

#: The keys each type stored in manifest format 2, the format released when the declaration
#: was written. A field that is not here is new: the upgrade-rule test below judges it.
FORMAT_2_KEYS = {
    SegmentEntry: ("base_offset", "next_offset", "record_count", "size", "min_timestamp",
                   "max_timestamp", "max_timestamp_offset", "segment_id", "writer_id",
                   "leader_epoch", "checksum", "index_size", "timeindex_size", "aborted_txns",
                   "delete_horizon_ms"),
    BatchMetadata: ("first_sequence", "last_sequence", "first_offset", "last_offset", "timestamp"),
    ProducerState: ("epoch", "batches", "last_timestamp", "txn_first_offset"),
    CommitInfo: ("id", "operation", "writer", "timestamp"),
    Manifest: ("topic", "partition", "version", "log_start_offset", "high_watermark",
               "leader_epoch", "cleaner_offset", "segments", "producers", "commit", "extra"),
}

#: Where readers of format 2 refuse an unknown key, so a new key there breaks them even if it
#: is optional: a manifest scalar arrives in a delta's ``changes.set`` ("delta sets unknown
#: field"), and a producer batch was built with ``BatchMetadata(**stored)`` before the
#: declaration.
REFUSED_BY_FORMAT_2_READERS = {(Manifest, "scalar"), (BatchMetadata, "any")}


# -- golden: the bytes older code wrote -------------------------------------------------------
@pytest.mark.parametrize("name", ["full_v5.json", "full_v6.json", "full_empty_v1.json"])
def test_a_full_version_written_by_older_code_reads_and_writes_back_byte_identical(name):
    stored = (DATA / name).read_bytes()
    assert Manifest.from_json(stored).to_json() == stored


def test_a_delta_written_by_older_code_applies_and_is_written_back_byte_identical():
    base = Manifest.from_json((DATA / "full_v5.json").read_bytes())
    stored = (DATA / "delta_v6_on_v5.json").read_bytes()
    new = delta.apply_delta(base, json.loads(stored))
    assert new.to_json() == (DATA / "full_v6.json").read_bytes()
    assert delta.encode(delta.delta_dict(base, new)) == stored


def test_the_golden_versions_hold_every_declared_key():
    """So the byte tests above cover every field, the optional one left out by default too."""
    full = json.loads((DATA / "full_v6.json").read_bytes())
    assert set(full) == {"format", "kind", *(f.key for f in Manifest.FIELDS)}
    seg_keys = set().union(*(s.keys() for s in full["segments"]))
    assert seg_keys == {f.key for f in SegmentEntry.FIELDS}
    (producer,) = full["producers"].values()
    # A field added since is omit_if_default: the golden lacks it and keeps its bytes; the
    # round-trip property below covers its stored form.
    later = {f.key for f in ProducerState.FIELDS if f.omit_if_default and f.key not in producer}
    assert later <= {"txn_start_ms"}
    assert set(producer) == {f.key for f in ProducerState.FIELDS} - later
    assert set(producer["batches"][0]) == {f.key for f in BatchMetadata.FIELDS}
    assert set(full["commit"]) == {f.key for f in CommitInfo.FIELDS}


# -- hypothesis: any manifest round-trips to the same bytes -----------------------------------
ints = st.integers(0, 2**40)
timestamps = st.integers(-1, 2**41)


@st.composite
def manifests(draw):
    """A well-formed manifest: segments tile the offsets, producers point below the high mark."""
    n = draw(st.integers(0, 4))
    segs, base = [], draw(st.integers(0, 1000))
    for i in range(n):
        span = draw(st.integers(1, 50))
        nxt = base + span
        lo = draw(timestamps)
        txns = draw(st.lists(st.tuples(ints, st.integers(0, base)), max_size=2))
        segs.append(SegmentEntry(
            base_offset=base, next_offset=nxt, record_count=draw(st.integers(0, span)),
            size=draw(ints), min_timestamp=lo,
            max_timestamp=-1 if lo == -1 else lo + draw(st.integers(0, 1000)),
            segment_id=f"s{i}{draw(st.text('abc123', max_size=4))}",
            writer_id=draw(st.integers(-5, 2**40)), leader_epoch=draw(st.integers(-1, 50)),
            checksum=draw(st.integers(0, 0xFFFFFFFF)), index_size=draw(ints),
            timeindex_size=draw(ints), aborted_txns=tuple((pid, f, f) for pid, f in txns),
            max_timestamp_offset=draw(st.sampled_from([-1, base])),
            delete_horizon_ms=draw(st.none() | ints)))
        base = nxt
    hw = base if segs else draw(st.integers(0, 1000))
    producers = {}
    for pid in draw(st.lists(ints, max_size=3, unique=True)):
        offsets = draw(st.lists(st.integers(0, hw - 1), max_size=5)) if hw else []
        batches = tuple(BatchMetadata(draw(ints), draw(ints), o, o, draw(timestamps))
                        for o in offsets)
        producers[pid] = ProducerState(
            epoch=draw(st.integers(0, 2**15)), batches=batches, last_timestamp=draw(timestamps),
            txn_first_offset=draw(st.none() | st.integers(0, hw - 1)) if hw else None,
            txn_start_ms=draw(st.none() | timestamps))
    json_values = st.recursive(st.none() | st.booleans() | ints | st.text(max_size=5),
                               lambda c: st.lists(c, max_size=3)
                               | st.dictionaries(st.text(max_size=3), c, max_size=3),
                               max_leaves=6)
    commit = draw(st.none() | st.builds(CommitInfo, st.text(max_size=6), st.text(max_size=6),
                                        st.text(max_size=6), ints))
    start = draw(st.integers(segs[0].base_offset, segs[0].next_offset - 1)) if segs else hw
    return Manifest(topic=draw(st.sampled_from(["t", "orders", "a.b-c_d"])),
                    partition=draw(st.integers(0, 100)), version=draw(st.integers(0, 10**6)),
                    segments=tuple(segs), log_start_offset=start,
                    leader_epoch=draw(st.integers(0, 100)), producers=producers,
                    cleaner_offset=draw(st.integers(0, hw)), commit=commit,
                    extra=draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_any_manifest_round_trips_to_the_same_value_and_bytes(m):
    stored = m.to_json()
    back = Manifest.from_json(stored)
    assert back == m
    assert back.to_json() == stored


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), manifests())
def test_any_delta_between_two_states_applies_back(a, b):
    from dataclasses import replace
    b = replace(b, topic=a.topic, partition=a.partition, version=a.version + 1)
    stored = delta.encode(delta.delta_dict(a, b))
    got = delta.apply_delta(a, json.loads(stored))
    assert got == b


# -- the declaration is the one list every reader follows -------------------------------------
def test_the_delta_and_verify_take_their_keys_from_the_declaration():
    assert [f.key for f in delta.SCALAR_FIELDS] == ["log_start_offset", "leader_epoch",
                                                    "cleaner_offset"]
    assert verify.EXPECTED_KEYS == ("base_offset", "next_offset", "record_count", "batch_count",
                                    "size", "min_timestamp", "max_timestamp", "checksum")
    entry = SegmentEntry(0, 3, 3, 70, 1, 2, "x1", 1, 0, 0xABC)
    assert verify.entry_expectations(entry) == {"record_count": 3, "size": 70,
                                                "checksum": "crc32c:00000abc"}


def test_every_field_is_an_attribute_and_every_attribute_is_stored():
    for cls in TYPES:
        names = [f.name for f in cls.FIELDS if not f.derived]
        assert sorted(names) == sorted(cls.__dataclass_fields__), cls.__name__
        assert len({f.key for f in cls.FIELDS}) == len(cls.FIELDS), cls.__name__


# -- the rolling-upgrade rules (docs/DESIGN.md section 3) -------------------------------------
def _stored(cls):
    """A stored dict of a real value of ``cls`` (from the golden full version)."""
    full = json.loads((DATA / "full_v6.json").read_bytes())
    return {Manifest: full, SegmentEntry: full["segments"][0], CommitInfo: full["commit"],
            ProducerState: full["producers"]["12"],
            BatchMetadata: full["producers"]["12"]["batches"][0]}[cls]


@pytest.mark.parametrize("cls", TYPES, ids=lambda c: c.__name__)
def test_an_optional_field_has_a_default_and_a_version_without_it_reads(cls):
    read = {Manifest: Manifest.from_dict, SegmentEntry: SegmentEntry.from_dict,
            CommitInfo: CommitInfo.from_dict, ProducerState: ProducerState.from_dict,
            BatchMetadata: BatchMetadata.from_dict}[cls]
    for f in cls.FIELDS:
        assert f.rule in (OPTIONAL, MUST_NOT_DROP), f
        if f.rule != OPTIONAL:
            continue
        assert f.default is not REQUIRED, f"{cls.__name__}.{f.name}: an optional field needs a default"
        d = dict(_stored(cls))
        d.pop(f.key, None)   # a field added after the golden may be absent from it already
        got = getattr(read(d), f.name)
        assert got == (f.decode(f.default) if f.decode else f.default), f


@pytest.mark.parametrize("cls", TYPES, ids=lambda c: c.__name__)
def test_readers_ignore_a_key_they_do_not_know(cls):
    read = getattr(cls, "from_dict")
    d = dict(_stored(cls), some_future_key=[1, {"x": 2}])
    assert read(d) == read(_stored(cls))


@pytest.mark.parametrize("cls", TYPES, ids=lambda c: c.__name__)
def test_a_new_field_follows_the_upgrade_rules(cls):
    """A key format-2 readers do not know is either optional where they ignore unknown keys,
    or must-not-drop with a manifest format bump (``since`` above 2, and the code writing it)."""
    for f in cls.FIELDS:
        assert f.since <= max(READABLE_FORMATS), (
            f"{cls.__name__}.{f.name}: since {f.since}, a format this code does not read")
        assert f.since == 1 or f.default is not REQUIRED, (
            f"{cls.__name__}.{f.name}: versions of formats before {f.since} lack it: give a default")
        if f.key in FORMAT_2_KEYS[cls]:
            continue
        kind = "scalar" if not (f.structured or f.identity or f.derived) else "other"
        refused = (cls, kind) in REFUSED_BY_FORMAT_2_READERS or (cls, "any") in REFUSED_BY_FORMAT_2_READERS
        if f.rule == MUST_NOT_DROP or refused:
            assert f.rule == MUST_NOT_DROP and f.since > 2, (
                f"{cls.__name__}.{f.name} is new and format-2 readers would drop or refuse it: "
                f"declare it must_not_drop with since={MANIFEST_FORMAT + 1} and bump the format")


def test_a_delta_setting_an_unknown_scalar_is_refused():
    """Why a new manifest scalar is not optional (the rule the test above enforces)."""
    base = Manifest.from_json((DATA / "full_v5.json").read_bytes())
    d = json.loads((DATA / "delta_v6_on_v5.json").read_bytes())
    d["changes"]["set"]["future_scalar"] = 1
    with pytest.raises(CorruptMetadataError, match="unknown field 'future_scalar'"):
        delta.apply_delta(base, d)


def test_a_field_of_a_format_not_written_yet_is_read_but_not_written():
    """The release before a format bump: it knows the new key (it reads versions a newer
    broker wrote) but writes the format every running broker reads."""
    from dataclasses import dataclass

    @stored_as_json
    @dataclass(frozen=True)
    class Entry:
        FIELDS = (Field("a"), Field("b", default=0, since=MANIFEST_FORMAT + 1,
                                    rule=MUST_NOT_DROP))
        a: int
        b: int = 0

    assert Entry._decode_fields({"a": 1, "b": 2}) == {"a": 1, "b": 2}
    assert Entry._decode_fields({"a": 1}) == {"a": 1, "b": 0}
    assert Entry(1, 2)._encode_fields() == {"a": 1}
