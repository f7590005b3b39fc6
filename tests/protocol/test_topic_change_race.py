"""CreatePartitions on broker A racing AlterConfigs on broker B (two brokers, one root), with a
fixed interleaving: A has read the topic when B's AlterConfigs lands, then A writes. Both
changes stay (before, A's overwrite of _topic.json dropped B's config, or B's dropped A's
partitions the other way round)."""
from __future__ import annotations

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, load_topic

from tests.faults import FaultyFS

T = "wt"


def _first_change_write(op: str, path: str) -> bool:
    return path.endswith(f"topics/{T}/_topic.json") or (
        f"topics/{T}/_meta/" in path and path.rsplit("/", 1)[-1].startswith("v"))


def test_create_partitions_on_one_broker_racing_alter_configs_on_another(module_root, storage):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

    create_topic(storage, T, 2, {"retention.ms": 1000})
    fs = FaultyFS(Storage(module_root).fs)
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=200)
    with BrokerThread(Storage(module_root, fs=fs), opts) as a, BrokerThread(Storage(module_root), opts) as b:
        admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
        admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
        answered = []

        def alter_on_b(op, path):  # runs on A's worker thread, after A read the topic
            res = ConfigResource("topic", T, set_config={"retention.ms": "5000",
                                                         "cleanup.policy": "compact"})
            admin_b.alter_configs([res])[res].result(15)
            answered.append(path)
        staged = fs.on_write(alter_on_b, match=_first_change_write)

        admin_a.create_partitions([NewPartitions(T, 4)])[T].result(20)

        assert staged.fired == 1 and answered
        meta = load_topic(storage, T)
        assert meta.partitions == 4
        assert meta.config.to_dict() == {"retention.ms": 5000, "cleanup.policy": "compact"}

        # The same growth again through B (which may still cache 2 partitions): refused as
        # Kafka refuses it, nothing changed.
        from confluent_kafka import KafkaException
        try:
            admin_b.create_partitions([NewPartitions(T, 4)])[T].result(20)
            raised = None
        except KafkaException as exc:
            raised = exc.args[0]
        assert raised is not None and raised.name() == "INVALID_PARTITIONS", raised
        assert load_topic(storage, T).partitions == 4
