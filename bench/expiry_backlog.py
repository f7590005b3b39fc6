"""Benchmark: how fast a backlog of old manifest versions expires.

    .venv/bin/python bench/expiry_backlog.py N

One partition on a ``file://`` root in a temporary directory with N versions (empty commits)
whose object times are set an hour back, then expired as the housekeeper does: bounded steps
(``ManifestStore.expire_step``, at most 1,024 versions each) in the housekeeping lane (deletes
paced, their directory fsynced every 16). Prints the wall and CPU time and versions expired a
second, to set against a busy partition's commit rate (13-15 a second in the fault harness).
"""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from kafkastore.clock import SYSTEM
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.threads import HOUSEKEEPING, in_lane
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter
n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
d = tempfile.mkdtemp(prefix="kafkastore-expiry-"); root = f"file://{d}/root"
st = Storage(root); create_topic(st, "b", 1)
w = LogWriter(st, housekeeping=False); w.send("b", b"x", partition=0); w.flush()
store = ManifestStore(st, "b", 0)
old = SYSTEM.wall_ms() / 1000 - 3600
for i in range(n):
    m = store.commit(lambda base: ([], []), operation="t")
    os.utime(os.path.join(d, "root", store.path(m.version)), (old + i * 0.01,) * 2)
print("versions", len(store.versions()), "load", os.getloadavg()[0])
t, c = time.perf_counter(), time.process_time()
steps = 0
with in_lane(HOUSEKEEPING):
    while True:
        gone, left = store.expire_step(SYSTEM.wall_ms(), 60_000, max_versions=1024)
        steps += 1
        if not left:
            break
dt, dc = time.perf_counter() - t, time.process_time() - c
print(f"expired to {len(store.versions())} listed in {steps} steps: {dt:.2f} s wall, {dc:.2f} CPU s, "
      f"{(n) / dt:.0f} versions/s, load {os.getloadavg()[0]:.1f}")
shutil.rmtree(d, ignore_errors=True)
