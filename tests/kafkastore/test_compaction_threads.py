"""Rewriting a group on several threads (``rewrite_group(threads=N)``) writes exactly what
one thread writes: chunks are decoded, filtered and re-encoded side by side, while the
transaction state and the markers are still decided in log order."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.maintenance.compaction import group_specs, load_plan, local_survivors, scan_tasks
from kafkastore.maintenance.compaction_rewrite import rewrite_group
from kafkastore.storage import Storage
from tests.helpers.compaction import T0, make_topic, produce_rounds

_round = st.lists(st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.text("xy", max_size=8))),
                  min_size=1, max_size=6)


def _outcome(storage, now, threads):
    m, plan = load_plan(storage, "t", 0, now, force=True)
    groups = group_specs([plan])
    keep, carry = local_survivors(storage, [plan], groups, scan_tasks(storage, [plan], groups, [m]))
    out = []
    for g in groups:
        r = rewrite_group(storage, plan.context, g, keep[g.index], carry[g.index], upload=False,
                          threads=threads)
        e = r.entry
        out.append((r.replaced, r.records_in, r.records_out, r.bytes_out,
                    None if e is None else (e.checksum, e.size, e.record_count, e.delete_horizon_ms,
                                            e.aborted_txns, e.min_timestamp, e.max_timestamp)))
    return out


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.tuples(_round, st.sampled_from(["plain", "commit", "abort"])),
                       min_size=2, max_size=8),
       now=st.sampled_from([T0, T0 + 10_000]))
def test_a_group_rewritten_on_threads_equals_the_one_thread_rewrite(tmp_path_factory, rounds, now):
    storage = Storage(tmp_path_factory.mktemp("t").as_uri())
    # one segment per round (each flush), all in one group: several chunks to share out
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=1000)
    produce_rounds(storage, rounds)
    one = _outcome(storage, now, 1)
    assert one and any(len(r[0]) > 1 for r in one)     # a group of several segments
    for threads in (2, 3):
        assert _outcome(storage, now, threads) == one
