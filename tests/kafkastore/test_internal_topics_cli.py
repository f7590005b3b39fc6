"""An operator cannot create internal topics at the command line either ("the
same must hold for every internal topic you have or add"): their owner makes them with its
partition count and config; `topics create __transaction_state --config cleanup.policy=delete`
would have let retention delete transaction state."""
from __future__ import annotations

import pytest

from kafkastore.cli.entry import main
from kafkastore.storage import Storage
from kafkastore.topics.admin import INTERNAL_TOPICS, topic_exists


@pytest.mark.parametrize("name", sorted(INTERNAL_TOPICS))
def test_topics_create_refuses_internal_topics(local_root, capsys, name):
    argv = ["--root", local_root, "topics", "create", name, "--partitions", "1",
            "--config", "cleanup.policy=delete"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"kafkastore: error: cannot create internal topic {name!r}: only kafkastore writes it"
    assert not topic_exists(Storage(local_root), name)


def test_topics_apply_refuses_a_config_listing_an_internal_topic(local_root, tmp_path, capsys):
    conf = tmp_path / "conf.yaml"
    conf.write_text("topics:\n  orders: {partitions: 1}\n  __consumer_offsets: {partitions: 1}\n")
    assert main(["--root", local_root, "--conf", str(conf), "topics", "apply"]) == 1
    assert "cannot create internal topic '__consumer_offsets'" in capsys.readouterr().err
    storage = Storage(local_root)
    assert not topic_exists(storage, "__consumer_offsets") and not topic_exists(storage, "orders")
