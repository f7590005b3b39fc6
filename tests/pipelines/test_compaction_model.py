"""A stateful model test of compaction (hypothesis ``RuleBasedStateMachine``).

Interleaves produce (keys from a small alphabet, some tombstones), the
passing of time, compaction with Spark, retention, crashed compactions
(faults while uploading, a failed commit, a lost commit response: the
one-process path, which shares the rewrite and commit code), and checks after
every step that the log is exactly what an in-memory model predicts:

* after a clean that reached offset ``fu``, below ``fu`` only the last
  record of each key is left, and a tombstone among them only until the first
  clean at least ``delete.retention.ms`` after the first clean that kept it
  (then it is gone); nothing at or above ``fu`` changes;
* retention removes whole segments below the new log start offset;
* records never change offset, key, value or order;
* a crashed compaction leaves exactly the old log.
"""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance.compaction_rewrite import STATUS_CLEANED, compact_partition_local
from kafkastore.errors import StorageError
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.retention import apply_retention
from kafkastore.storage import Storage
from pipelines.jobs.log_compaction import compact_partition
from tests.faults import faulty_storage
from tests.helpers.compaction import T0, TOPIC, make_topic, read_all

DELETE_RETENTION_MS = 1000
RETENTION_MS = 6000
SPARK = {}


class CompactionModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="compaction-model-")
        self.url = f"file://{self.dir}/root"
        self.storage = Storage(self.url)
        make_topic(self.storage, cleanup_policy="compact,delete", segment_bytes=260,
                   delete_retention_ms=DELETE_RETENTION_MS, retention_ms=RETENTION_MS,
                   min_cleanable_dirty_ratio=0.2)
        self.now = T0
        self.produced: dict[int, tuple[str, str | None]] = {}
        self.expected: set[int] = set()         # the offsets the log must hold
        self.seen: dict[int, int] = {}          # tombstone offset -> time of the first clean keeping it
        self.broker = Broker(self.storage, clock=lambda: self.now, producer_id=1)

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules -----------------------------------------------------------------
    @initialize(rounds=st.lists(st.lists(st.tuples(st.sampled_from("abcd"),
                                                   st.sampled_from([None, "1", "2"])),
                                         min_size=1, max_size=4), min_size=2, max_size=4))
    def start(self, rounds):
        for items in rounds:
            self.produce(items)

    @rule(items=st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from([None, "1", "2", "3"])),
                         min_size=1, max_size=5))
    def produce(self, items):
        store = ManifestStore(self.storage, TOPIC, 0)
        hw = store.latest().high_watermark if store.latest() else 0
        for key, value in items:
            self.broker.send(TOPIC, None if value is None else value.encode(), key=key.encode(),
                             timestamp=self.now, partition=0)
        self.broker.flush()
        assert store.latest().high_watermark == hw + len(items)   # one writer: offsets in order
        for i, item in enumerate(items):
            self.produced[hw + i] = item
            self.expected.add(hw + i)

    # Steps around delete.retention.ms, so cleans land just before, at and after horizons.
    @rule(ms=st.sampled_from([1, 300, DELETE_RETENTION_MS - 1, DELETE_RETENTION_MS,
                              DELETE_RETENTION_MS + 1, 2500]))
    def tick(self, ms):
        self.now += ms

    @precondition(lambda self: any(t + DELETE_RETENTION_MS > self.now for t in self.seen.values()))
    @rule(delta=st.sampled_from([-1, 0]))
    def clean_at_a_horizon(self, delta):
        """Jump to just before (or exactly at) the next tombstone horizon and clean there."""
        horizon = min(t + DELETE_RETENTION_MS for t in self.seen.values()
                      if t + DELETE_RETENTION_MS > self.now)
        self.now = max(self.now, horizon + delta)
        self.compact(force=True)

    @rule(force=st.booleans())
    def compact(self, force):
        res = compact_partition(SPARK["session"], self.storage, TOPIC, 0, self.now, force)
        self._cleaned(res)

    @rule()
    def retention(self):
        apply_retention(self.storage, TOPIC, 0, self.now)
        start = ManifestStore(self.storage, TOPIC, 0).latest().log_start_offset
        self.expected = {o for o in self.expected if o >= start}

    @rule(fault=st.sampled_from(["upload", "commit", "lost response"]))
    def crash(self, fault):
        store = ManifestStore(self.storage, TOPIC, 0)
        before, version = read_all(self.storage), (store.latest().version if store.latest() else 0)
        storage, fs = faulty_storage(self.url)
        if fault == "upload":
            fs.fail_before_write(match=".log", count=None)
        elif fault == "commit":
            fs.fail_before_write(match="_manifest/", count=None)
        else:
            fs.lose_response(match="_manifest/")
        saved = ManifestStore.backoff_initial_s
        ManifestStore.backoff_initial_s = 0.0
        try:
            res = compact_partition_local(storage, TOPIC, 0, self.now, force=True)
        except StorageError:
            latest = store.latest()
            assert (latest.version if latest else 0) == version      # old log, exactly
            assert read_all(self.storage) == before
            return
        finally:
            ManifestStore.backoff_initial_s = saved
        self._cleaned(res)

    def _cleaned(self, res):
        """What a clean that reached ``first_uncleanable_offset`` at ``self.now`` must leave."""
        if res.status != STATUS_CLEANED:
            return
        below = sorted(o for o in self.expected if o < res.first_uncleanable_offset)
        last = {self.produced[o][0]: o for o in below}
        for o in below:
            key, value = self.produced[o]
            if last[key] != o:
                self.expected.discard(o)          # superseded
            elif value is None:
                if o not in self.seen:
                    self.seen[o] = self.now       # kept, with horizon now + delete.retention.ms
                elif self.now >= self.seen[o] + DELETE_RETENTION_MS:
                    self.expected.discard(o)      # horizon passed

    # -- the check -------------------------------------------------------------
    @invariant()
    def matches_the_model(self):
        m = ManifestStore(self.storage, TOPIC, 0).latest()
        if m is None:
            return
        records = read_all(self.storage)
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(set(offsets))
        for o, k, v in records:
            assert self.produced[o] == (k, v), f"offset {o} changed"
        expected = sorted(o for o in self.expected if o >= m.log_start_offset)
        assert offsets == expected, (
            f"log holds {offsets}, model says {expected} (tombstones kept since {self.seen})")


def test_compaction_against_a_model(spark):
    SPARK["session"] = spark
    run_state_machine_as_test(
        CompactionModel,
        settings=settings(max_examples=5, stateful_step_count=20, deadline=None,
                          suppress_health_check=list(HealthCheck), derandomize=False))
