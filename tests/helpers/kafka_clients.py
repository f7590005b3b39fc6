"""Reading a topic back with the CLI and with confluent-kafka (client and broker tests)."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from kafkastore.cli.entry import main as cli


def cli_consume(root: str, topic: str) -> list[dict]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(["--root", root, "consume", topic]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def confluent_consume(bootstrap: str, topic: str, partitions: int, expected: int, **conf):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    import time
    deadline = time.time() + 30
    while len(got) < expected and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return got
