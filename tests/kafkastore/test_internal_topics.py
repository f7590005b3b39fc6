"""Internal topics (``__consumer_offsets``): clients cannot write or delete them, and reading
the offsets topic survives records that do not decode."""
from __future__ import annotations

import logging

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.cli.entry import main
from kafkastore.errors import InternalTopicError, UnknownTopicError
from kafkastore.groups.offsets import (OFFSETS_TOPIC, OffsetAndMetadata, OffsetsStore,
                                       encode_group_key, encode_offset_key,
                                       partition_for_group)
from kafkastore.storage import Storage
from kafkastore.topics.admin import INTERNAL_TOPICS, delete_topic, is_internal_topic, topic_exists


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("KAFKASTORE_ROOT", "KAFKASTORE_CONF", "KAFKASTORE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)


def test_the_predicate():
    assert OFFSETS_TOPIC in INTERNAL_TOPICS and is_internal_topic("__transaction_state")
    assert not is_internal_topic("orders") and not is_internal_topic("__mine")


def test_clients_cannot_produce_to_or_delete_the_offsets_topic(local_root):
    s = Storage(local_root)
    store = OffsetsStore(s, partitions=2)
    store.commit_offsets("g", {("t", 0): OffsetAndMetadata(3)})
    with pytest.raises(InternalTopicError, match="internal topic '__consumer_offsets'"):
        Broker(s).send(OFFSETS_TOPIC, b"junk", key=b"\x00")
    with pytest.raises(InternalTopicError):
        Broker(s).send_many(OFFSETS_TOPIC, [b"junk"])
    with pytest.raises(InternalTopicError):
        delete_topic(s, OFFSETS_TOPIC)
    assert topic_exists(s, OFFSETS_TOPIC)
    # the owner still writes it
    store.commit_offsets("g", {("t", 0): OffsetAndMetadata(4)})
    assert OffsetsStore(s).group("g").offsets == {("t", 0): OffsetAndMetadata(4)}


def test_cli_produce_to_the_offsets_topic_is_refused(local_root, capsys, monkeypatch):
    import io
    import sys

    OffsetsStore(Storage(local_root), partitions=1).commit_offsets("g", {("t", 0): OffsetAndMetadata(1)})
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"value": "junk"}\n')))
    capsys.readouterr()
    rc = main(["--root", local_root, "produce", OFFSETS_TOPIC])
    err = capsys.readouterr().err
    assert rc != 0
    assert "internal topic '__consumer_offsets'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def _junk_writer(s: Storage) -> Broker:
    """What an older broker (or an imported log) could have left: records the coordinator
    never wrote. Only a test opts in to writing them."""
    b = Broker(s)
    b.allow_internal = True
    return b


def test_bad_records_are_skipped_and_reported(local_root, caplog, capsys):
    s = Storage(local_root)
    store = OffsetsStore(s, partitions=1)
    store.commit_offsets("good", {("t", 0): OffsetAndMetadata(5)})
    b = _junk_writer(s)
    good_key = encode_offset_key("good", "t", 1)
    b.send(OFFSETS_TOPIC, b"\x00\x03", key=b"\x00\x01\x00\x05ab")  # key truncated at byte 4
    b.send(OFFSETS_TOPIC, b"junk", key=good_key)                # value does not parse
    b.send(OFFSETS_TOPIC, b"\x00\x03\x00", key=encode_group_key("good"))  # bad group value
    b.flush()
    store.commit_offsets("good", {("t", 2): OffsetAndMetadata(7)})  # written after the junk

    caplog.clear()  # (the writer's own catch-up read reported them too)
    with caplog.at_level(logging.WARNING, logger="kafkastore.group_offsets"):
        fresh = OffsetsStore(s)
        assert fresh.groups() == ["good"]
        assert fresh.group("good").offsets == {("t", 0): OffsetAndMetadata(5),
                                               ("t", 2): OffsetAndMetadata(7)}
    assert fresh.skipped_records == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    p = partition_for_group("good", 1)
    assert len(warnings) == 3
    assert f"__consumer_offsets/{p} offset 1:" in warnings[0]
    assert "truncated at byte 4" in warnings[0]
    assert f"__consumer_offsets/{p} offset 3:" in warnings[2]

    # the CLI lists and describes the group (the warnings go to stderr, the listing to stdout)
    capsys.readouterr()
    assert main(["--root", local_root, "groups", "list"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["good"]
    assert main(["--root", local_root, "groups", "describe", "good"]) == 0
    # the group stays available for new commits through the owner
    store.commit_offsets("good", {("t", 0): OffsetAndMetadata(6)})
    assert OffsetsStore(s).group("good").offsets[("t", 0)] == OffsetAndMetadata(6)


def test_deleting_an_unknown_topic(local_root):
    with pytest.raises(UnknownTopicError):
        delete_topic(Storage(local_root), "nope")
