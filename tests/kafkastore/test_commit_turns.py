"""Committers of one process take turns per partition: a slow committer (a merge
whose attempt must read the versions that landed since, a GET each on S3) is not starved by a
fast one (the broker committing several times a second). Before, on a loaded machine's moto
S3, the housekeeper's merge commit lost 26 races in 28 s, its uploads grew too old to commit
and live segments grew with every produce commit."""
from __future__ import annotations

import threading
import time
import uuid

from kafkastore.manifest import ManifestStore, SetExtra
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

T = "turns"


def test_a_slow_committer_is_not_starved_by_a_fast_one_in_the_same_process():
    storage = Storage(f"memory://turns-{uuid.uuid4().hex}")
    create_topic(storage, T, 1)
    ManifestStore(storage, T, 0).commit(lambda m: ([SetExtra("fast", 0)], []))
    stop = threading.Event()
    fast_commits = []

    def fast_writer():
        store = ManifestStore(storage, T, 0)
        i = 0
        while not stop.is_set():
            i += 1
            fast_commits.append(store.commit(lambda m, i=i: ([SetExtra("fast", i)], [])).version)
            time.sleep(0.001)   # the broker's work between commits

    thread = threading.Thread(target=fast_writer, daemon=True)
    thread.start()
    try:
        while len(fast_commits) < 5:
            time.sleep(0.005)
        attempts = []

        def slow_build(m):
            attempts.append(m.version)
            time.sleep(0.05)        # a slow attempt: ~10+ fast commits would land meanwhile
            return [SetExtra("slow", "done")], []

        m = ManifestStore(storage, T, 0).commit(slow_build, max_attempts=3)
    finally:
        stop.set()
        thread.join(10)
    assert len(attempts) == 1 and m.extra["slow"] == "done"
    assert len(fast_commits) > 5     # the fast writer kept going before and after
    latest = ManifestStore(storage, T, 0).latest()
    assert latest.extra["slow"] == "done" and latest.extra["fast"] == len(fast_commits)
