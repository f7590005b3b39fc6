"""``kafkastore groups``: offline list / describe / delete / reset-offsets over the root."""
from __future__ import annotations

import json
import time

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.cli.entry import main
from kafkastore.groups.offsets import (GroupMetadata, MemberMetadata, OffsetAndMetadata,
                                       OffsetsStore, encode_consumer_assignment)
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("KAFKASTORE_ROOT", "KAFKASTORE_CONF", "KAFKASTORE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cli(capsys, local_root):
    def run(*argv):
        capsys.readouterr()
        rc = main(["--root", local_root] + list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture
def seeded(local_root):
    """Topic ``t`` (2 partitions: 10 and 4 records, timestamps 1000+i), group ``g`` with commits."""
    s = Storage(local_root)
    create_topic(s, "t", 2)
    b = Broker(s)
    for i in range(10):
        b.send("t", b"v%d" % i, partition=0, timestamp=1000 + i)
    for i in range(4):
        b.send("t", b"w%d" % i, partition=1, timestamp=1000 + i)
    b.flush()
    store = OffsetsStore(s)
    store.commit_offsets("g", {("t", 0): OffsetAndMetadata(3, -1, "m", 5), ("t", 1): OffsetAndMetadata(4)})
    return s


def live_member(store: OffsetsStore, group: str, now: int, session: int = 10_000):
    assignment = encode_consumer_assignment({"t": [0, 1]})
    store.store_group(GroupMetadata(group, "consumer", 2, "range", "m-1", now,
                                    (MemberMetadata("m-1", None, "cli-1", "/127.0.0.1", 1000, session,
                                                    b"", assignment),)))


def test_list_and_describe(cli, seeded):
    assert cli("groups", "list")[1].split() == ["g"]
    rc, out, _ = cli("groups", "describe", "g")
    d = json.loads(out)
    assert rc == 0 and d["state"] == "Empty" and d["members"] == []
    rows = {(r["topic"], r["partition"]): r for r in d["offsets"]}
    assert rows[("t", 0)]["current_offset"] == 3 and rows[("t", 0)]["log_end_offset"] == 10
    assert rows[("t", 0)]["lag"] == 7 and rows[("t", 1)]["lag"] == 0
    live_member(OffsetsStore(seeded), "g", int(time.time() * 1000))
    d = json.loads(cli("groups", "describe", "g")[1])
    assert d["state"] == "Stable" and d["members"][0]["assignment"] == {"t": [0, 1]}
    assert {r["member_id"] for r in d["offsets"]} == {"m-1"}


def test_unknown_group_is_a_one_line_error(cli, seeded):
    rc, out, err = cli("groups", "describe", "nope")
    assert rc == 1 and err.startswith("kafkastore: error:") and "nope" in err and len(err.splitlines()) == 1


def test_reset_offsets_dry_run_then_execute(cli, seeded):
    rc, out, err = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")
    plan = json.loads(out)
    assert rc == 0 and plan["executed"] is False and plan["partitions"]["0"]["new_offset"] == 0
    assert "dry run" in err
    assert OffsetsStore(seeded).group("g").offsets[("t", 0)].offset == 3  # unchanged
    rc, out, _ = cli("groups", "reset-offsets", "g", "--topic", "t:0", "--to-offset", "99", "--execute")
    assert rc == 0 and json.loads(out)["partitions"]["0"]["new_offset"] == 10  # clamped to the log end
    offsets = OffsetsStore(seeded).group("g").offsets
    assert offsets[("t", 0)].offset == 10 and offsets[("t", 1)].offset == 4
    cli("groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "1970-01-01T00:00:01.005",
        "--execute")
    offsets = OffsetsStore(seeded).group("g").offsets
    assert offsets[("t", 0)].offset == 5 and offsets[("t", 1)].offset == 4
    cli("groups", "reset-offsets", "new-group", "--topic", "t", "--to-latest", "--execute")
    assert OffsetsStore(seeded).group("new-group").offsets[("t", 1)].offset == 4


def test_changes_refused_while_members_are_live(cli, seeded):
    now = int(time.time() * 1000)
    live_member(OffsetsStore(seeded), "g", now)
    for argv in (("groups", "delete", "g"),
                 ("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")):
        rc, _, err = cli(*argv)
        assert rc == 1 and "live member" in err
    # once the session timeout has passed since the coordinator last wrote, they are gone
    live_member(OffsetsStore(seeded), "g", now - 20_000)
    assert cli("groups", "delete", "g")[0] == 0
    assert cli("groups", "list")[1].split() == []
    assert cli("groups", "delete", "g")[0] == 1


def test_bad_arguments(cli, seeded):
    rc, _, err = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday")
    assert rc == 1 and "ISO" in err
    rc, _, err = cli("groups", "reset-offsets", "g", "--topic", "t:7", "--to-earliest")
    assert rc == 1 and "partitions" in err
    rc, _, err = cli("groups", "reset-offsets", "g", "--topic", "nope", "--to-earliest")
    assert rc == 1 and "unknown topic" in err
