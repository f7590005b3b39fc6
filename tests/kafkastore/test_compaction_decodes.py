"""The rewrite decodes only the batches that can keep a record: a stretch of data batches
with none of their offsets among the survivors (or aborted, or empty) is dropped without
being decoded (``REWRITE_SKIP_BYTES`` set to 0 here: every such stretch; by default from
256 KiB), and a batch whose records all survive is copied with its bytes and offsets.
A create-time batch that keeps every record is not decoded either when the C walk is
built (``_keep_whole``; tests/kafkastore/test_compaction_whole_batches.py)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format.record_batch import CREATE_TIME
from kafkastore.format.segment_scan import iter_batches
from kafkastore.maintenance import compaction_rewrite
from kafkastore.maintenance.compaction import group_specs, load_plan, local_survivors, scan_tasks
from kafkastore.maintenance.compaction_rewrite import decode_runs, rewrite_group
from kafkastore.storage import Storage
from tests.helpers.compaction import T0, counting_decoder, make_topic, produce, produce_rounds


#: The C walk of batches kept whole, read once (monkeypatch undoes changes after a test,
#: not between hypothesis examples).
WALK = compaction_rewrite._restamp


def _source_batches(storage, group):
    """``[(header, bytes)]`` of every batch of the group's segments, in order."""
    out = []
    for seg in group.segments:
        log = storage.get(seg.paths("t", 0)[".log"])
        out.extend((h, bytes(log[pos:pos + h.size])) for pos, h in iter_batches(log))
    return out


def _rewrite_all(storage, now, threads=1):
    m, plan = load_plan(storage, "t", 0, now, force=True)
    groups = group_specs([plan])
    keep, carry = local_survivors(storage, [plan], groups, scan_tasks(storage, [plan], groups, [m]))
    return [(g, keep[g.index], rewrite_group(storage, plan.context, g, keep[g.index],
                                             carry[g.index], threads=threads))
            for g in groups]


def _kept_whole(batches, keep, now, aborted=()):
    """Records of the data batches the walk takes without decoding: create time, every
    offset in ``keep``, no passed delete horizon (none without the walk)."""
    if WALK is None:
        return 0
    kept = set(keep.tolist())
    return sum(h.record_count for h, _ in batches
               if not h.is_control and h.base_offset not in aborted and h.record_count
               and h.timestamp_type == CREATE_TIME
               and (h.delete_horizon_ms is None or now < h.delete_horizon_ms)
               and sum(h.base_offset <= o <= h.last_offset for o in kept) == h.record_count)


def _with_a_survivor(batches, keep, aborted=()):
    """Records of the data batches holding at least one offset of ``keep``."""
    kept = set(keep.tolist())
    return sum(h.record_count for h, _ in batches
               if not h.is_control and h.base_offset not in aborted
               and any(h.base_offset <= o <= h.last_offset for o in kept))


def test_superseded_batches_are_not_decoded(tmp_path, monkeypatch):
    # The survivors' batch keeps every record: without the walk it is decoded, with it not.
    monkeypatch.setattr(compaction_rewrite, "_restamp", None)
    storage = Storage(tmp_path.as_uri())
    make_topic(storage, segment_bytes=10 ** 6)
    for i in range(4):                                   # every key rewritten in each round
        produce(storage, [(k, f"{k}{i}") for k in "abcdefgh"])
    produce(storage, [("a", "new")])                     # the head, not cleaned
    rows = counting_decoder(monkeypatch, 0)
    (group, keep, result), = _rewrite_all(storage, T0)
    batches = _source_batches(storage, group)
    assert result.records_out == 8
    # Only the last round's batch holds survivors: 8 of the 32 records decoded, not 32.
    assert sum(rows) == _with_a_survivor(batches, keep) == 8


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(1, 100), st.booleans()), max_size=30),
       skip=st.integers(1, 300))
def test_decode_runs_cover_every_needed_batch_and_skip_only_long_stretches(batches, skip):
    sizes = [s for s, _ in batches]
    needed = [n for _, n in batches]
    runs = list(decode_runs(sizes, needed, skip))
    covered = [i for a, b in runs for i in range(a, b + 1)]
    assert covered == sorted(set(covered))                      # disjoint, in order
    assert {i for i, n in enumerate(needed) if n} <= set(covered)
    for a, b in runs:
        assert needed[a] and needed[b]
        stretch = 0                                             # inside a run: short gaps only
        for i in range(a, b + 1):
            stretch = 0 if needed[i] else stretch + sizes[i]
            assert stretch < skip
    for (_, b), (a, _) in zip(runs, runs[1:]):                 # between runs: a long gap
        assert sum(sizes[b + 1:a]) >= skip


_round = st.lists(st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.text("xy", max_size=8))),
                  min_size=1, max_size=6)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.tuples(_round, st.sampled_from(["plain", "commit", "abort"])),
                       min_size=2, max_size=8),
       now=st.sampled_from([T0, T0 + 10_000]), threads=st.sampled_from([1, 2]))
def test_only_batches_with_survivors_are_decoded_and_whole_ones_keep_their_bytes(
        tmp_path_factory, monkeypatch, rounds, now, threads):
    storage = Storage(tmp_path_factory.mktemp("t").as_uri())
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=1000)
    produce_rounds(storage, rounds)
    m, _ = load_plan(storage, "t", 0, now, force=True)
    aborted_bases = {h for s in m.segments for pid, first, last in s.aborted_txns
                     for h in range(first, last + 1)}
    rows = counting_decoder(monkeypatch, 0)
    decoded_max = 0
    for group, keep, result in _rewrite_all(storage, now, threads):
        source = _source_batches(storage, group)
        decoded_max += (_with_a_survivor(source, keep, aborted_bases)
                        - _kept_whole(source, keep, now, aborted_bases))
        if result.entry is None:
            continue
        out = storage.get(result.entry.paths("t", 0)[".log"])
        by_base = {h.base_offset: (h, data) for h, data in source}
        for pos, h in iter_batches(out):
            src = by_base[h.base_offset]               # offsets never move
            if (src[0].record_count == h.record_count
                    and src[0].delete_horizon_ms == h.delete_horizon_ms):
                assert bytes(out[pos:pos + h.size]) == src[1]    # kept whole: its own bytes
    # The rewrite decodes the batches that can keep a record and are not kept whole, nothing else.
    assert sum(rows) == decoded_max
