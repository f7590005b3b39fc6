"""plan_merge (pure): which adjacent segments merge, and the bounds of the policy.

The simulation applies every planned run after each append, as the automatic
housekeeping does, and checks the two bounds of kafkastore/merge.py's
docstring: live segments <= 2*S/B + F*(G+1) + 1 and every byte rewritten at
most G <= log2(B / smallest commit) times.
"""
from __future__ import annotations

import math
import random

from hypothesis import given, settings, strategies as st

from kafkastore.manifest import SegmentEntry
from kafkastore.maintenance.merge import (DEFAULT_FAN_IN, generation, merged_segment_id, plan_merge)

_ids = iter(range(10 ** 9))


def seg(base, size, count=1, gen=0, ts=1000):
    sid = merged_segment_id(gen) if gen else f"{next(_ids):016x}"
    return SegmentEntry(base_offset=base, next_offset=base + count, record_count=count, size=size,
                        min_timestamp=ts, max_timestamp=ts, segment_id=sid, writer_id=0,
                        leader_epoch=0, checksum=0)


def chain(sizes, gens=None, ts=None):
    out, base = [], 0
    for i, size in enumerate(sizes):
        out.append(seg(base, size, gen=(gens or [0] * len(sizes))[i],
                       ts=(ts or [1000] * len(sizes))[i]))
        base += 1
    return out


def test_generation_is_carried_in_the_id():
    assert generation(merged_segment_id(3)) == 3
    assert generation("0123456789abcdef") == 0


def test_fan_in_same_generation_runs_merge():
    segs = chain([10] * 9)
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0)
    assert [r.segment_ids for r in runs] == [tuple(s.segment_id for s in segs[0:4]),
                                             tuple(s.segment_id for s in segs[4:8])]
    assert all(r.generation == 1 for r in runs)


def test_fewer_than_fan_in_or_mixed_generations_do_not_merge():
    assert plan_merge(chain([10] * 3), 1000, fan_in=4, min_segments=0) == []
    assert plan_merge(chain([10] * 4, gens=[1, 0, 0, 0]), 1000, fan_in=4, min_segments=0) == []


def test_never_larger_than_segment_bytes_and_capped_runs_pack():
    runs = plan_merge(chain([400, 400, 400, 400]), 1000, fan_in=4, min_segments=0)
    # the first pair is capped (a third would pass 1000 bytes); the second waits for more
    assert [len(r.segments) for r in runs] == [2]
    assert all(r.size <= 1000 for r in runs)
    assert plan_merge(chain([600, 600, 600, 600]), 1000, fan_in=4, min_segments=0) == []


def test_never_across_a_gap_a_barrier_or_an_excluded_segment():
    segs = chain([10] * 8)
    gapped = segs[:2] + [s.__class__(**{**s.to_dict(), "aborted_txns": (),
                                        "base_offset": s.base_offset + 100,
                                        "next_offset": s.next_offset + 100})
                         for s in segs[2:]]
    runs = plan_merge(gapped, 1000, fan_in=4, min_segments=0)
    assert [r.segments[0].base_offset for r in runs] == [102]
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0, barriers=[2])
    assert [r.segments[0].base_offset for r in runs] == [2]
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0, exclude=[segs[1].segment_id])
    assert [r.segments[0].base_offset for r in runs] == [2]


def test_segment_ms_limits_the_time_span():
    segs = chain([10] * 4, ts=[0, 10, 20, 5000])
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0, segment_ms=1000)
    assert [len(r.segments) for r in runs] == [3]  # capped by time: packed without the last


def test_small_partitions_are_left_alone():
    assert plan_merge(chain([10] * 7), 1000, fan_in=4, min_segments=8) == []
    assert plan_merge(chain([10] * 8), 1000, fan_in=4, min_segments=8)


def simulate(commits, segment_bytes, fan_in=DEFAULT_FAN_IN, first_fan_in=None, runs_made=None):
    """Append each commit as a segment, merge until the plan is empty; (segments, rewritten).
    ``runs_made`` (a list) collects every run merged."""
    segs: list[SegmentEntry] = []
    base = 0
    rewritten = 0
    for size in commits:
        segs.append(seg(base, size))
        base += 1
        while True:
            runs = plan_merge(segs, segment_bytes, fan_in=fan_in, min_segments=0,
                              first_fan_in=first_fan_in)
            if runs_made is not None:
                runs_made.extend(runs)
            if not runs:
                break
            for run in reversed(runs):
                i = segs.index(run.segments[0])
                j = i + len(run.segments)
                assert segs[i:j] == list(run.segments)
                assert run.size <= segment_bytes
                merged = seg(run.segments[0].base_offset, run.size, count=0, gen=run.generation)
                merged = merged.__class__(**{**merged.to_dict(), "aborted_txns": (),
                                             "next_offset": run.segments[-1].next_offset,
                                             "record_count": 0})
                segs[i:j] = [merged]
                rewritten += run.size
    return segs, rewritten


def _draw_appends(data, n: int) -> tuple[int, int, list[int]]:
    """A segment.bytes, the smallest commit's size and ``n`` commit sizes (seeded, so a
    failing example replays): the writers' appends of the bound properties."""
    segment_bytes = data.draw(st.sampled_from([1 << 16, 1 << 18, 1 << 20]), label="segment.bytes")
    low = data.draw(st.integers(60, 200), label="smallest commit")
    high = data.draw(st.integers(low, low * 10), label="largest commit")
    rng = random.Random(data.draw(st.integers(0, 2 ** 32), label="seed"))
    return segment_bytes, low, [rng.randint(low, high) for _ in range(n)]


@settings(max_examples=4, deadline=None)
@given(st.data())
def test_10000_small_appends_bounded_live_segments_and_rewrites(data):
    segment_bytes, low, commits = _draw_appends(data, 10_000)
    segs, rewritten = simulate(commits, segment_bytes)
    total = sum(commits)
    assert sum(s.size for s in segs) == total
    g = max(generation(s.segment_id) for s in segs)
    g_bound = math.log2(segment_bytes / low)
    assert g <= g_bound
    # every byte rewritten at most G times
    assert rewritten <= g * total
    assert len(segs) <= 2 * total / segment_bytes + DEFAULT_FAN_IN * (g + 1) + 1, (
        len(segs), total / segment_bytes, g)


def test_uniform_trickle_stays_near_size_over_segment_bytes():
    segs, rewritten = simulate([100] * 10_000, 1 << 16)
    assert len(segs) <= 1.5 * (10_000 * 100 / (1 << 16)) + 3 * DEFAULT_FAN_IN
    assert rewritten / (100 * 10_000) <= math.log(1 << 16, DEFAULT_FAN_IN)


def test_pack_joins_neighbours_of_any_generation_up_to_the_caps():
    segs = chain([10, 10, 10, 500, 600, 10], gens=[1, 2, 0, 0, 0, 3])
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0, pack=True)
    assert [len(r.segments) for r in runs] == [4, 2]
    assert [r.generation for r in runs] == [3, 4]


def test_first_generation_merges_in_runs_of_first_fan_in_and_later_ones_of_fan_in():
    assert plan_merge(chain([10] * 15), 1000, fan_in=4, min_segments=0, first_fan_in=16) == []
    segs = chain([10] * 20)
    runs = plan_merge(segs, 1000, fan_in=4, min_segments=0, first_fan_in=16)
    assert [r.segment_ids for r in runs] == [tuple(s.segment_id for s in segs[:16])]
    assert runs[0].generation == 1
    gen1 = chain([10] * 4, gens=[1] * 4)
    assert [len(r.segments) for r in plan_merge(gen1, 1000, fan_in=4, min_segments=0,
                                                first_fan_in=16)] == [4]
    # the caps still stop a first-generation run, which then packs
    runs = plan_merge(chain([300] * 5), 1000, fan_in=4, min_segments=0, first_fan_in=16)
    assert [len(r.segments) for r in runs] == [3]


@settings(max_examples=3, deadline=None)
@given(st.data())
def test_a_bigger_first_fan_in_keeps_the_bounds_with_fewer_runs(data):
    segment_bytes, low, commits = _draw_appends(data, 3_000)
    first = data.draw(st.sampled_from([8, 16]), label="first fan-in")
    packed: list = []
    segs, rewritten = simulate(commits, segment_bytes, first_fan_in=first, runs_made=packed)
    plain: list = []
    _, plain_rewritten = simulate(commits, segment_bytes, runs_made=plain)
    total = sum(commits)
    assert sum(s.size for s in segs) == total
    g = max(generation(s.segment_id) for s in segs)
    assert g <= math.log2(segment_bytes / low)
    assert rewritten <= g * total
    # generation 0's block holds up to first - 1 segments, the others' up to F - 1
    assert len(segs) <= 2 * total / segment_bytes + first + DEFAULT_FAN_IN * g + 1, (
        len(segs), total / segment_bytes, g)
    # generation 0 is most runs: about 4 / first as many runs in all, fewer bytes rewritten
    assert len(packed) <= 0.6 * len(plain) and rewritten <= plain_rewritten
