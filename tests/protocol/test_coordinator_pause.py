"""A group coordinator paused past the liveness window fences itself before serving again.

Two ``kafkastore serve`` processes over one root. The group's coordinator is stopped
(SIGSTOP) for longer than the liveness window; the other broker takes the group over and
acknowledges a newer commit. When the paused broker resumes, it must not answer from the
state it held before the pause (a consumer would restart from the older offset and commit
the regression back into the log): it drops what it derived from its lost authority and
reads the group again.
"""
from __future__ import annotations

import signal
import sys
import time

import pytest

from kafkastore.protocol.wire import codec
from kafkastore.protocol.apis.groups import coordinator_node
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.serve_procs import start_serve, stop_serve, wait_until_listed
from tests.protocol.wire import Wire

TOPIC = "gt"


def _req(api: int, version: int, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def _part(api: int, version: int, cls: str, /, **kw):
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def _commit(bootstrap: str, group: str, offset: int) -> int:
    w = Wire(bootstrap, timeout=15)
    try:
        r = w.call(_req(8, 6, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        topics=(_part(8, 6, "OffsetCommitRequestTopic", name=TOPIC, partitions=(
                            _part(8, 6, "OffsetCommitRequestPartition", partition_index=0,
                                  committed_offset=offset, committed_leader_epoch=-1,
                                  committed_metadata=""),)),)))
    finally:
        w.close()
    return int(getattr(r.topics[0].partitions[0].error_code, "value", r.topics[0].partitions[0].error_code))


def _fetch(bootstrap: str, group: str) -> tuple[int, int]:
    w = Wire(bootstrap, timeout=15)
    try:
        r = w.call(_req(9, 5, group_id=group, require_stable=False, topics=(
            _part(9, 5, "OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0,)),)))
    finally:
        w.close()
    return int(getattr(r.error_code, "value", r.error_code)), r.topics[0].partitions[0].committed_offset


@pytest.mark.slow
def test_a_resumed_coordinator_never_answers_offsets_older_than_acknowledged(tmp_path):
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), TOPIC, 1)
    a = start_serve(root, node_id=0)
    b = start_serve(root, node_id=1)
    try:
        wait_until_listed([a.bootstrap, b.bootstrap])
        brokers = [(0, "127.0.0.1", int(a.bootstrap.rsplit(":", 1)[1])),
                   (1, "127.0.0.1", int(b.bootstrap.rsplit(":", 1)[1]))]
        group = next(g for g in (f"pause-{i}" for i in range(1000))
                     if coordinator_node(g, brokers)[0] == 0)   # coordinated by a
        assert _commit(a.bootstrap, group, 10) == 0
        assert _fetch(a.bootstrap, group) == (0, 10)      # a has the group loaded

        a.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while _commit(b.bootstrap, group, 20) != 0:    # b takes over once a looks dead
                assert time.monotonic() < deadline, "b never took the group over"
                time.sleep(0.2)
            time.sleep(1.0)
        finally:
            a.send_signal(signal.SIGCONT)
        err, offset = _fetch(a.bootstrap, group)
        assert err != 0 or offset == 20, f"the resumed coordinator answered offset {offset}"
    finally:
        for p in (a, b):
            stop_serve(p)
