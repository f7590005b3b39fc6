"""A merge's CPU-bound walk of the merged log runs in bounded steps, with the GIL handed over
between them in the housekeeping lane, and gives the same indexes as one whole walk."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore import threads
from kafkastore.errors import CorruptRecordError
from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.format.segment_build import rebuild_indexes
from kafkastore.format.segment_scan import scan_log
from kafkastore.maintenance import merge as merge_mod
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter

T, P = "steps", 0


def _log(sizes: list[int], base: int = 0) -> bytes:
    """One batch per entry of ``sizes`` (records in that batch), offsets from ``base``."""
    out, off = [], base
    for n in sizes:
        out.append(encode_batch([Record(off + i, 1_700_000_000_000 + off + i, b"k", b"v" * 40)
                                 for i in range(n)]))
        off += n
    return b"".join(out)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=0, max_size=60),
       step=st.integers(1, 3000), base=st.integers(0, 1 << 40))
def test_steps_are_bounded_and_walk_the_whole_log(sizes, step, base):
    log = _log(sizes, base)
    steps = list(merge_mod.scan_steps(log, base, "seg", step))
    for s in steps:
        assert s, "no empty step"
        assert len(s) == 1 or sum(h.size for _, h in s) <= step
    flat = [b for s in steps for b in s]
    assert flat == scan_log(log, base_offset=base).batches
    assert rebuild_indexes(log, base, 100, batches=flat) == rebuild_indexes(log, base, 100)


def test_damage_raises_as_the_whole_walk_does():
    log = bytearray(_log([3] * 20))
    log[len(log) // 2] ^= 0xFF
    with pytest.raises(CorruptRecordError) as whole:
        rebuild_indexes(bytes(log), 0, 100, segment="seg")
    with pytest.raises(CorruptRecordError) as stepped:
        list(merge_mod.scan_steps(bytes(log), 0, "seg", 512))
    assert type(stepped.value) is type(whole.value)
    assert str(stepped.value) == str(whole.value)


def test_between_steps_does_nothing_outside_the_housekeeping_lane(monkeypatch):
    slept = []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    threads.between_steps()
    assert slept == []
    with threads.in_lane(threads.HOUSEKEEPING):
        threads.between_steps()
    assert slept == [0]   # nothing of the ack path in flight: the GIL is dropped once


def test_a_merge_in_the_housekeeping_lane_hands_over_between_bounded_steps(tmp_path, monkeypatch):
    """The structure behind flat acks while merging: between two calls of ``between_steps``
    the merge walks at most one step of log bytes (plus the batch that ends it)."""
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    w = LogWriter(storage, housekeeping=False, clock=lambda: 1_700_000_000_000)
    for i in range(40):
        for j in range(20):
            w.send(T, b"v" * 60, key=b"%d-%d" % (i, j), partition=P)
        w.flush()
    before = ManifestStore(storage, T, P).latest()
    log_bytes = sum(s.size for s in before.segments)

    step_bytes = 2048
    walked = [0]      # bytes of batches walked since the last hand-over
    longest = [0]
    handovers = [0]
    biggest_batch = [0]
    real_iter = merge_mod.iter_batches

    def counting_iter(*a, **kw):
        for pos, h in real_iter(*a, **kw):
            walked[0] += h.size
            biggest_batch[0] = max(biggest_batch[0], h.size)
            longest[0] = max(longest[0], walked[0])
            yield pos, h

    def handover():
        assert threads.current_lane() == threads.HOUSEKEEPING
        handovers[0] += 1
        walked[0] = 0

    monkeypatch.setattr(merge_mod, "SCAN_STEP_BYTES", step_bytes)
    monkeypatch.setattr(merge_mod, "iter_batches", counting_iter)
    monkeypatch.setattr(merge_mod, "between_steps", handover)
    with threads.in_lane(threads.HOUSEKEEPING):
        report = merge_mod.merge_partition(storage, T, P, min_segments=0, rounds=3)
    assert report.merged
    assert handovers[0] >= log_bytes // step_bytes
    assert longest[0] <= step_bytes + biggest_batch[0]
    after = ManifestStore(storage, T, P).latest()
    assert len(after.segments) < len(before.segments)
