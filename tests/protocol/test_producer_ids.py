"""Producer-id blocks claimed on the one commit engine: races, lost responses, the budget."""
from __future__ import annotations

import json
import random

import pytest

from kafkastore.commit import Clock
from kafkastore.errors import CommitGaveUpError
from kafkastore.protocol.coordinators.producer_ids import PRODUCER_IDS_DIR, ProducerIdAllocator
from kafkastore.storage import Storage
from tests.faults import FaultyFS


def faulty(root_url):
    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    return storage, fs, Storage(root_url, fs=fs)


def no_sleep():
    return Clock(sleep=lambda s: None)


def blocks(storage):
    return sorted(i.path.rsplit("/", 1)[-1] for i in storage.list(PRODUCER_IDS_DIR))


def test_a_lost_race_moves_on_to_the_next_block(root_url):
    storage, fs, mine = faulty(root_url)
    rival = ProducerIdAllocator(storage, block_size=10, owner="rival")
    fs.on_write(lambda op, path: rival.allocate(), match=PRODUCER_IDS_DIR, count=1)
    a = ProducerIdAllocator(mine, block_size=10, owner="me", clock=no_sleep())
    assert a.allocate() == 20 and rival.allocate() == 11   # the rival holds block 1
    assert blocks(storage) == [f"{1:020d}.json", f"{2:020d}.json"]


def test_a_lost_response_is_read_back_as_ours(root_url):
    storage, fs, mine = faulty(root_url)
    fs.lose_response(match=PRODUCER_IDS_DIR)
    fs.fail_reads(match=lambda op, path: op == "read" and PRODUCER_IDS_DIR in path, count=1)
    a = ProducerIdAllocator(mine, block_size=10, owner="me", clock=no_sleep())
    assert [a.allocate() for _ in range(3)] == [10, 11, 12]
    assert blocks(storage) == [f"{1:020d}.json"]            # claimed once, not twice
    doc = json.loads(storage.get(f"{PRODUCER_IDS_DIR}/{1:020d}.json"))
    assert doc["owner"] == "me" and doc["block_size"] == 10


def test_claiming_gives_up_after_its_budget(root_url, monkeypatch):
    storage, fs, mine = faulty(root_url)
    rival = ProducerIdAllocator(storage, block_size=10, owner="rival")
    fs.on_write(lambda op, path: rival._claim_block(), match=PRODUCER_IDS_DIR, count=None)
    monkeypatch.setattr(ProducerIdAllocator, "max_attempts", 3)
    slept = []
    a = ProducerIdAllocator(mine, block_size=10, clock=Clock(sleep=slept.append),
                            rng=random.Random(1))
    with pytest.raises(CommitGaveUpError, match="after 3 conflicting attempts"):
        a.allocate()
    assert len(slept) == 2 and len(blocks(storage)) == 3    # all the rival's
