"""The harness's checker: from clients' histories and a final read of the log, count
anomalies. Pure functions over plain data, so each count is tested on hand-made histories.

Inputs (all plain lists/dicts, values are record payloads unique per write). A partition
is any hashable key; the runner uses ``(topic, partition)`` tuples, so one history covers
several topics:

* ``acked``: values whose produce was acknowledged;
* ``committed_txns`` / ``aborted_txns``: ``{txn_id: {partition: [values]}}`` as the
  transactional clients saw their EndTxn answered (commit acknowledged / abort);
* ``final_committed`` / ``final_uncommitted``: ``{partition: [(offset, value)]}`` read
  at the end under read_committed / read_uncommitted;
* ``polls``: ``[(consumer, partition, offset)]`` in the order each consumer polled them;
  ``(consumer, partition, None)`` marks a (re)assignment; a skip is a committed record
  between two consecutive polls of one consumer on one partition (no compaction here);
* ``commits``: ``[(group, partition, offset)]`` in the order commits were acknowledged;
* ``lso`` / ``hwm`` / ``open_txns``: per partition, after the run quiesced and the
  transaction timeout passed;
* ``missing_files``: paths a manifest references that the store does not hold;
* ``at_least_once``: value prefixes of producers without idempotence, whose duplicates
  Kafka allows (counted by :func:`count_resent`, not as an anomaly).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict

ANOMALIES = ("lost", "duplicated", "aborted-read", "torn", "poll-skip", "nonmonotonic-poll",
             "committed-offset-regression", "hanging-lso", "missing-file")

__all__ = ["ANOMALIES", "check", "format_table"]


def _values(read: dict) -> list:
    return [v for recs in read.values() for _, v in recs]


def count_lost(acked, committed_txns, final_committed) -> int:
    """Acknowledged (plain or in a committed transaction) and never read under read_committed."""
    seen = set(_values(final_committed))
    want = set(acked) | {v for parts in committed_txns.values() for vs in parts.values() for v in vs}
    return len(want - seen)


def count_duplicated(final_uncommitted, at_least_once=()) -> int:
    """Extra copies of a value in the log (each value is written once by its client), not
    counting values whose prefix is in ``at_least_once``: a producer without idempotence
    resends a batch whose answer it lost (a broker killed after its commit), and Kafka
    promises it at-least-once only. Those are :func:`count_resent`."""
    return sum(n - 1 for v, n in Counter(_values(final_uncommitted)).items()
               if n > 1 and not str(v).startswith(tuple(at_least_once)))


def count_resent(final_uncommitted, at_least_once=()) -> int:
    """Extra copies of at-least-once producers' values (reported, not an anomaly)."""
    if not at_least_once:
        return 0
    return sum(n - 1 for v, n in Counter(_values(final_uncommitted)).items()
               if n > 1 and str(v).startswith(tuple(at_least_once)))


def count_aborted_read(aborted_txns, final_committed) -> int:
    """Records of aborted transactions read under read_committed."""
    aborted = {v for parts in aborted_txns.values() for vs in parts.values() for v in vs}
    return sum(1 for v in _values(final_committed) if v in aborted)


def count_torn(committed_txns, aborted_txns, final_committed) -> int:
    """Transactions visible on some of their partitions and not on others."""
    seen_by_part = {p: {v for _, v in recs} for p, recs in final_committed.items()}
    torn = 0
    for parts in list(committed_txns.values()) + list(aborted_txns.values()):
        visible = [any(v in seen_by_part.get(p, ()) for v in vs) for p, vs in parts.items() if vs]
        if visible and any(visible) and not all(visible):
            torn += 1
    return torn


def count_poll_anomalies(polls, final_committed) -> tuple[int, int]:
    """(poll-skip, nonmonotonic-poll): per consumer and partition, consecutive polled offsets
    that jump over committed records present in the final read_committed log (aborted data
    and control records are legitimately skipped), or go backwards without a
    (re)assignment mark.

    A poll list may contain ``(consumer, partition, None)`` to mark a (re)assignment, after
    which the next offset starts a new run."""
    offsets_by_part = {p: sorted(o for o, _ in recs) for p, recs in final_committed.items()}
    last: dict = {}
    skips = nonmono = 0
    for consumer, part, off in polls:
        key = (consumer, part)
        if off is None:
            last.pop(key, None)
            continue
        prev = last.get(key)
        if prev is not None:
            if off <= prev:
                nonmono += 1
            else:
                present = offsets_by_part.get(part, [])
                # Committed records strictly between two consecutive polls: skipped (by
                # bisection: a long run has tens of thousands of polls and records).
                skips += max(0, bisect_left(present, off) - bisect_right(present, prev))
        last[key] = off
    return skips, nonmono


def count_commit_regressions(commits) -> int:
    """Acknowledged committed offsets that go back, per group and partition."""
    best: dict = {}
    regressions = 0
    for group, part, off in commits:
        key = (group, part)
        if key in best and off < best[key]:
            regressions += 1
        best[key] = max(off, best.get(key, off))
    return regressions


def count_hanging_lso(lso, hwm, open_txns) -> int:
    """Partitions whose last stable offset stays behind the high watermark with no open
    transaction that could still complete."""
    return sum(1 for p, h in hwm.items() if lso.get(p, h) < h and not open_txns.get(p))


def check(h: dict) -> dict:
    """Every anomaly count for a history ``h`` (keys as in the module docstring)."""
    fc, fu = h.get("final_committed", {}), h.get("final_uncommitted", {})
    ct, at = h.get("committed_txns", {}), h.get("aborted_txns", {})
    skips, nonmono = count_poll_anomalies(h.get("polls", []), fc)
    return {
        "lost": count_lost(h.get("acked", []), ct, fc),
        "duplicated": count_duplicated(fu, h.get("at_least_once", ())),
        "aborted-read": count_aborted_read(at, fc),
        "torn": count_torn(ct, at, fc),
        "poll-skip": skips,
        "nonmonotonic-poll": nonmono,
        "committed-offset-regression": count_commit_regressions(h.get("commits", [])),
        "hanging-lso": count_hanging_lso(h.get("lso", {}), h.get("hwm", {}), h.get("open_txns", {})),
        "missing-file": len(h.get("missing_files", [])),
    }


def format_table(counts: dict, extra: dict | None = None) -> str:
    """A two-column table: ``extra`` (records, transactions, faults by kind) then anomalies
    (the checker's, then any a workload counted itself)."""
    rows = list((extra or {}).items()) + [(k, counts[k]) for k in ANOMALIES] + \
        [(k, v) for k, v in counts.items() if k not in ANOMALIES]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
