"""The process's housekeeper (the one a writer and `serve` poke) merges the writers' small
segments in runs of HOUSEKEEPING_FIRST_FAN_IN, and later generations at the fan-in: fewer
runs, uploads and deletes per commit, the same records."""
from __future__ import annotations

from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import housekeeper_for
from kafkastore.maintenance.merge import (DEFAULT_MIN_SEGMENTS, HOUSEKEEPING_FIRST_FAN_IN,
                                          generation)
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter

T, P = "events", 0


def test_the_process_housekeeper_merges_first_generation_segments_in_bigger_runs(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    writer = LogWriter(storage)   # housekeeping=True: the process's housekeeper
    n = DEFAULT_MIN_SEGMENTS + HOUSEKEEPING_FIRST_FAN_IN
    for i in range(n):
        writer.send(T, b"r%03d" % i, partition=P)
        writer.flush()            # one segment per commit
    hk = housekeeper_for(storage)
    assert hk.wait(60)
    assert not hk.errors
    store = ManifestStore(storage, T, P)
    head = store.latest()
    first_runs = []
    for v in range(1, head.version + 1):
        m = store.load(v)
        if m.commit.operation != "merge":
            continue
        prev = {s.segment_id: s for s in store.load(v - 1).segments}
        for s in m.segments:
            if s.segment_id not in prev and generation(s.segment_id) == 1:
                first_runs.append(sum(1 for p in prev.values()
                                      if s.base_offset <= p.base_offset < s.next_offset))
    assert first_runs and set(first_runs) == {HOUSEKEEPING_FIRST_FAN_IN}, first_runs
    rows = PartitionReader(storage, T, P).read(-2).to_pylist()
    assert [r["value"] for r in rows] == [b"r%03d" % i for i in range(n)]
    writer.close()
