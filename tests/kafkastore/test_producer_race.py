"""Writers racing on one partition all finish; conflicts back off with
jitter and have no fixed attempt cap (each conflict means another writer made progress)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from kafkastore.errors import CommitConflict
from kafkastore.manifest import AppendSegments, ManifestStore, SetExtra
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.logdata import upload_segment

KAFKASTORE = os.path.join(os.path.dirname(sys.executable), "kafkastore")
T = "race"


def test_conflicts_beyond_any_fixed_cap_back_off_with_jitter(root_url):
    """25 conflicts in a row (the old cap was 10): the commit still lands; each back-off is
    drawn from [0, cap] (full jitter) with the injected sleep and random source."""
    fs = FaultyFS(Storage(root_url).fs)
    storage = Storage(root_url, fs=fs)
    create_topic(storage, T, 1)
    rival = ManifestStore(Storage(root_url), T, 0)
    rounds = iter(range(25))

    def other_writer_first(op, path):
        i = next(rounds, None)
        if i is not None:  # another writer lands the version we are about to put
            rival.commit(lambda m: ([SetExtra("rival", i)], []))

    fs.on_write(other_writer_first, match=lambda op, path: "/_manifest/" in path, count=25)
    slept = []
    import random
    store = ManifestStore(storage, T, 0, sleep=slept.append, rng=random.Random(7))
    entry = upload_segment(storage, T, 0, 0, [1])

    def build(m):
        hw = m.high_watermark if m else 0
        seg = entry if hw == 0 else upload_segment(storage, T, 0, hw, [1])
        return [AppendSegments((seg,))], []

    m = store.commit(build)
    assert m.extra["rival"] == 24 and m.high_watermark == 1 and len(slept) == 25
    for attempt, delay in enumerate(slept, 1):
        assert 0 <= delay <= min(store.backoff_max_s, store.backoff_initial_s * 2 ** (attempt - 1))
    assert len(set(slept)) == len(slept)  # jittered, not a fixed schedule
    # An explicit cap still exists for callers that want one.
    fs.on_write(lambda op, path: rival.commit(lambda m: ([SetExtra("rival", -1)], [])),
                match=lambda op, path: "/_manifest/" in path, count=3)
    with pytest.raises(CommitConflict, match="after 3 conflicting attempts"):
        store.commit(lambda m: ([SetExtra("mine", 1)], []), max_attempts=3)


def _produce(root: str, tag: str, n: int) -> subprocess.Popen:
    lines = "".join(json.dumps({"value": f"{tag}-{i}"}) + "\n" for i in range(n)).encode()
    p = subprocess.Popen([KAFKASTORE, "--root", root, "produce", T, "--partition", "0",
                          "--flush-every", "1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(lines)
    p.stdin.close()
    return p


@pytest.mark.parametrize("backend, n", [("file", 300), ("s3", 60)])  # moto is slow: fewer
def test_two_producers_flushing_every_record_both_finish(backend, n, tmp_path, request):
    from tests.helpers.roots import make_root_url

    root = make_root_url(backend, tmp_path, request)
    create_topic(Storage(root), T, 1)
    started = time.monotonic()
    procs = {tag: _produce(root, tag, n) for tag in ("a", "b")}
    errors = {}
    for tag, p in procs.items():
        try:
            p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail(f"producer {tag} did not finish")
        errors[tag] = p.stderr.read().decode()
        assert p.returncode == 0, errors[tag]
    assert time.monotonic() - started < 240
    out = subprocess.run([KAFKASTORE, "--root", root, "consume", T], capture_output=True,
                         timeout=120, check=True).stdout.decode()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["offset"] for r in rows] == list(range(2 * n))
    for tag in ("a", "b"):
        assert [r["value"] for r in rows if r["value"].startswith(tag)] == [
            f"{tag}-{i}" for i in range(n)]
