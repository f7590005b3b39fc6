"""The survivor rule's key map (kafkastore.maintenance.compaction.latest_dirty_offsets): the
C kernel (format/native/keymap.c: keys hashed into a table, keys that share a hash told apart
by their bytes) and the Arrow path give exactly the answer of a dict of the key bytes, also
when every key is forced onto one hash or onto a 1-bit hash; and the vectorised survivor rule
built on it equals the reference (survivor_rule) with either implementation."""
from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.format.extensions import ENABLED, load
from kafkastore.maintenance import compaction
from kafkastore.maintenance.compaction import (KIND_RECORD, KIND_TXN, latest_dirty_offsets,
                                               survivor_rule)
from tests.helpers.compaction import scan_rows, scan_table

NATIVE = load("kafkastore.format._native")
HAVE_KERNEL = NATIVE is not None and hasattr(NATIVE, "latest_per_key")
needs_kernel = pytest.mark.skipif(not HAVE_KERNEL, reason="the C kernel is not built")

# Short keys (copied into the kernel's entries), keys longer than 16 bytes (pointed at),
# keys that differ in their last byte only, and the empty key.
KEYS = [b"", b"a", b"b", b"ab", b"key-000000000001", b"key-000000000002",
        b"x" * 17, b"x" * 16 + b"y", b"long key " * 5, b"long key " * 5 + b"!"]

_rows = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(KEYS), st.booleans()), max_size=80)


@contextlib.contextmanager
def hash_bits(bits: int):
    """The kernel keeps only the top ``bits`` bits of every key's hash meanwhile."""
    old = NATIVE._set_key_hash_bits(bits)
    try:
        yield
    finally:
        NATIVE._set_key_hash_bits(old)


def reference(rows) -> list[int]:
    latest: dict = {}
    for i, (plan, key, dirty) in enumerate(rows):
        if dirty:
            latest[(plan, key)] = max(latest.get((plan, key), -1), 10 * i)
    return [latest.get((plan, key), -1) for plan, key, _ in rows]


def columns(rows, chunk: int):
    """The keys as a chunked array of ``chunk`` rows per chunk, each a slice (a non-zero
    offset into its buffers), and the other columns."""
    keys = [k for _, k, _ in rows]
    padded = pa.array([b"pad"] + keys + [b"pad"], pa.binary()).slice(1, len(keys))
    chunks = [padded.slice(i, chunk) for i in range(0, len(keys), chunk)] or [padded]
    dirty = np.array([d for _, _, d in rows], bool)
    offsets = np.arange(len(rows), dtype=np.int64) * 10
    plans = np.array([p for p, _, _ in rows], np.int32)
    return pa.chunked_array(chunks, pa.binary()), dirty, offsets, plans


@given(rows=_rows, chunk=st.integers(1, 30))
@settings(deadline=None, max_examples=150)
@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_kernel), False])
def test_the_key_map_equals_a_dict_of_the_key_bytes(native, rows, chunk):
    keys, dirty, offsets, plans = columns(rows, chunk)
    got = latest_dirty_offsets(keys, dirty, offsets, plans, native=native)
    assert got.tolist() == reference(rows)
    one_plan = [(0, k, d) for _, k, d in rows]   # plans=None: one partition
    assert latest_dirty_offsets(keys, dirty, offsets, native=native).tolist() == reference(one_plan)


@needs_kernel
@given(rows=_rows, chunk=st.integers(1, 30), bits=st.sampled_from([0, 1, 2]))
@settings(deadline=None, max_examples=150)
def test_keys_forced_onto_one_hash_are_told_apart_by_their_bytes(rows, chunk, bits):
    """A constant (0 bits), 1-bit or 2-bit hash: every lookup meets keys of other bytes on
    its hash, and none may share their offset."""
    keys, dirty, offsets, plans = columns(rows, chunk)
    with hash_bits(bits):
        got = latest_dirty_offsets(keys, dirty, offsets, plans, native=True)
    assert got.tolist() == reference(rows)


@needs_kernel
def test_a_table_that_doubles_many_times_keeps_every_key():
    """100,000 distinct keys and a repeat of each (the table starts at 1,024 slots), once
    with a 1-bit hash on a smaller set (every key in two probe runs)."""
    n = 100_000
    keys = [b"k%d" % (i % n) for i in range(2 * n)]
    dirty = np.array([i % 3 != 0 for i in range(2 * n)])
    offsets = np.arange(2 * n, dtype=np.int64)
    want = reference([(0, k, d) for k, d in zip(keys, dirty)])
    want = [w if w < 0 else w // 10 for w in want]
    assert latest_dirty_offsets(pa.array(keys, pa.binary()), dirty, offsets, native=True).tolist() == want
    small = 3_000
    with hash_bits(1):
        got = latest_dirty_offsets(pa.array(keys[:small], pa.binary()), dirty[:small],
                                   offsets[:small], native=True)
    assert got.tolist() == [i if dirty[i] else -1 for i in range(small)]


@needs_kernel
def test_other_key_types_and_null_keys_give_the_same_answer():
    """A large_binary column (Arrow from another producer) goes through the kernel; a column
    with a null key takes the Arrow path, where null is a key of its own."""
    keys = [b"a", b"b", b"a", None, b"b", None]
    dirty = np.array([1, 1, 0, 1, 0, 0], bool)
    offsets = np.arange(6, dtype=np.int64)
    big = pa.array([k or b"" for k in keys], pa.large_binary())
    assert latest_dirty_offsets(big, dirty, offsets).tolist() == [0, 1, 0, 3, 1, 3]
    nulls = pa.array(keys, pa.binary())
    for native in (True, False):
        assert latest_dirty_offsets(nulls, dirty, offsets, native=native).tolist() == \
            [0, 1, 0, 3, 1, 3]


def test_the_kernel_is_the_default_when_built():
    assert compaction.KEY_MAP_IMPLEMENTATION == ("native" if HAVE_KERNEL and ENABLED else "arrow")


@needs_kernel
def test_bad_offsets_are_refused_not_read():
    with pytest.raises(ValueError):
        NATIVE.latest_per_key([(2, 0, np.array([0, 4, 9], np.int32).tobytes(), b"abcd")],
                              np.ones(2, np.uint8), np.zeros(2, np.int64))
    with pytest.raises(ValueError):
        NATIVE.latest_per_key([(2, 0, np.array([0, 3, 2], np.int32).tobytes(), b"abcd")],
                              np.ones(2, np.uint8), np.zeros(2, np.int64))


IMPLEMENTATIONS = [pytest.param(("native", 64), marks=needs_kernel),
                   pytest.param(("native", 0), marks=needs_kernel),
                   pytest.param(("native", 1), marks=needs_kernel),
                   ("arrow", 64)]


@given(rows=scan_rows(KEYS), shuffle=st.randoms(use_true_random=False))
@settings(deadline=None)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda v: f"{v[0]}-{v[1]}bits")
def test_the_vectorised_rule_equals_the_reference_with_either_key_map(impl, rows, shuffle):
    """pipelines' ``survivors`` (what a compaction task decides) keeps exactly the records
    and carries exactly the transactions survivor_rule does, with the C key map (also with
    its hash forced to 0 or 1 bit) and with the Arrow one."""
    from pipelines.jobs.log_compaction import survivors  # lazy: the pipelines layer, for its rule only

    which, bits = impl
    table = scan_table(rows, shuffle)
    keep, carry = survivor_rule([table.to_pydict()])
    old = compaction.KEY_MAP_IMPLEMENTATION
    compaction.KEY_MAP_IMPLEMENTATION = which
    try:
        with hash_bits(bits) if which == "native" else contextlib.nullcontext():
            got = survivors(table).to_pylist()
    finally:
        compaction.KEY_MAP_IMPLEMENTATION = old
    assert sorted((r["grp"], r["offset"]) for r in got if r["kind"] == KIND_RECORD) == \
        sorted((g, o) for g, offs in keep.items() for o in offs)
    assert {(r["grp"], r["pid"]) for r in got if r["kind"] == KIND_TXN} == \
        {(g, p) for g, pids in carry.items() for p in pids}
