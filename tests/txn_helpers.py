"""Shared by the transaction tests (tests/txn, and tests/broker's read_committed and restart
tests): what a read_committed (or read_uncommitted) librdkafka consumer sees of a topic, and
the coordinator's view of a transactional id."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from waits import on_broker


def read_values(bootstrap: str, topic: str, partitions: int = 1, *, isolation: str = "read_committed",
                expect: int | None = None) -> list[bytes]:
    """Every value a consumer of ``isolation`` reads from the topic's start up to the end it
    may read (the LSO for read_committed), in partition then offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        for _ in range(600):  # polls of up to 0.5 s: a bound, never the expected path
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    if len(at_end) == partitions and (expect is None or sum(map(len, values.values())) >= expect):
                        break
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            values[msg.partition()].append(msg.value())
            at_end.discard(msg.partition())
        else:
            raise AssertionError(f"the consumer did not reach the end of {topic}")
        return [v for p in range(partitions) for v in values[p]]
    finally:
        consumer.close()


def txn_state(broker: Any, transactional_id: str) -> str:
    """The coordinator's state for the id ("" when unknown)."""
    return on_broker(broker, lambda b: b.transactions.describe(transactional_id).state)
