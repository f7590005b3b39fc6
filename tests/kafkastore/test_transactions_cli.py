"""An operator can clear a hanging transaction: `kafkastore transactions list` finds it in
the log, `kafkastore transactions abort` ends it with an ABORT marker, and read_committed
readers move past it."""
from __future__ import annotations

import json

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.cli import main

T = "orders"


def _committed(storage):
    return PartitionReader(storage, T, 0).read(-2).column("value").to_pylist()


def test_list_then_abort_a_hanging_transaction(local_root, capsys):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    zombie = Broker(storage, producer_id=41, producer_epoch=3, housekeeping=False)
    zombie.begin_transaction()
    zombie.send(T, b"never committed", partition=0)
    zombie.flush()                     # its coordinator is gone: no marker will ever come
    later = Broker(storage, housekeeping=False)
    later.send(T, b"after", partition=0)
    later.flush()
    assert _committed(storage) == []   # read_committed stops at the open transaction

    assert main(["--root", local_root, "transactions", "list", T]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(t["partition"], t["producer_id"], t["producer_epoch"], t["first_offset"])
            for t in listed] == [(0, 41, 3, 0)]

    assert main(["--root", local_root, "transactions", "abort", T, "--partition", "0",
                 "--producer-id", "41", "--producer-epoch", "2"]) != 0   # wrong epoch: refused
    assert "epoch 3, not 2" in capsys.readouterr().err
    assert main(["--root", local_root, "transactions", "abort", T, "--partition", "0",
                 "--producer-id", "41", "--producer-epoch", "3"]) == 0
    capsys.readouterr()
    assert _committed(storage) == [b"after"]
    assert main(["--root", local_root, "transactions", "list", T]) == 0
    assert capsys.readouterr().out == ""


def test_write_txn_markers_clears_a_hanging_transaction_through_serve(local_root):
    """What kafka-transactions.sh abort sends (WriteTxnMarkers), through `serve`."""
    import sys

    from kafkastore.protocol.wire import codec
    from kafkastore.protocol.server import BrokerThread, ServeOptions
    from tests.protocol.wire import Wire

    storage = Storage(local_root)
    create_topic(storage, T, 1)
    zombie = Broker(storage, producer_id=52, producer_epoch=1, housekeeping=False)
    zombie.begin_transaction()
    zombie.send(T, b"hanging", partition=0)
    zombie.flush()
    assert _committed(storage) == []
    req_cls = codec.request_class(27, 1)
    mod = sys.modules[req_cls.__module__]
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        w = Wire(broker.bootstrap, timeout=10)
        r = w.call(codec.make(req_cls, markers=(codec.make(
            mod, "WritableTxnMarker", producer_id=52, producer_epoch=1, transaction_result=False,
            coordinator_epoch=0, topics=(codec.make(mod, "WritableTxnMarkerTopic", name=T,
                                                    partition_indexes=(0,)),)),)))
        w.close()
    assert int(getattr(r.markers[0].topics[0].partitions[0].error_code, "value", 0)) == 0
    after = Broker(storage, housekeeping=False)
    after.send(T, b"after", partition=0)
    after.flush()
    assert _committed(Storage(local_root)) == [b"after"]   # the aborted record stays hidden


def test_abort_takes_the_topic_as_a_flag_too(local_root, capsys):
    """``--topic T`` as kafka-transactions.sh spells it; no topic at all is a one-line error."""
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    zombie = Broker(storage, producer_id=43, producer_epoch=0, housekeeping=False)
    zombie.begin_transaction()
    zombie.send(T, b"hanging", partition=0)
    zombie.flush()
    assert main(["--root", local_root, "transactions", "abort", "--partition", "0",
                 "--producer-id", "43", "--producer-epoch", "0"]) != 0
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["--root", local_root, "transactions", "abort", "--topic", T, "--partition", "0",
                 "--producer-id", "43", "--producer-epoch", "0"]) == 0
    assert main(["--root", local_root, "transactions", "list", "--topic", T]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith('{"aborted"')
