"""A kafka-python consumer group, and kafka-python's admin client, against a real broker.

Each member is a KafkaConsumer polling in its own thread; its rebalance listener feeds an
:class:`Ownership` log keyed by the generation kafka-python reports.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from group_helpers import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    TIMEOUT_S,
    Consumed,
    Ownership,
    create_topic,
    numbered_topic,
)
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka import errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from waits import block_until

from pulllog.testing import BrokerThread

PARTITIONS = 12
PER_PARTITION = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A broker that holds a new group's first join for a second (group.initial.rebalance.delay.ms,
    three seconds in Kafka by default). Without it a kafka-python leader may assign before its
    metadata lists the topic (an empty first generation), and kafka-python 3.0.12 sometimes
    stalls after such an assignment without ever fetching."""
    with BrokerThread(tmp_path / "data", properties={"group.initial.rebalance.delay.ms": "1000"}) as handle:
        yield handle


class Member(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, bootstrap: str, group_id: str, topic: str, name: str, ownership: Ownership,
                 consumed: Consumed | None = None, **options: Any) -> None:
        self.name, self.topic, self.ownership, self.consumed = name, topic, ownership, consumed
        self.options = dict(bootstrap_servers=bootstrap, group_id=group_id, client_id=name,
                            auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_interval_ms=30000,
                            auto_commit_interval_ms=500, max_poll_records=20, **options)
        self.consumer: KafkaConsumer | None = None
        self.outside_assignment: list[tuple[int, int]] = []
        self._calls: queue.Queue[tuple[Callable[[KafkaConsumer], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.ownership.revoked(self.name, [tp.partition for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        assert self.consumer is not None
        generation = self.consumer.group_metadata().generation_id
        self.ownership.assigned(self.name, generation, [tp.partition for tp in assigned])

    def do(self, fn: Callable[[KafkaConsumer], Any]) -> Any:
        """Run ``fn(consumer)`` on the member's own thread (a KafkaConsumer is not thread-safe)."""
        future: Future[Any] = Future()
        self._calls.put((fn, future))
        return future.result(TIMEOUT_S)

    def _run(self) -> None:
        self.consumer = KafkaConsumer(**self.options)
        self.consumer.subscribe([self.topic], listener=self)
        try:
            while not self._stop.is_set():
                while not self._calls.empty():
                    fn, future = self._calls.get()
                    try:
                        future.set_result(fn(self.consumer))
                    except Exception as exc:  # noqa: BLE001 - handed to the caller of do()
                        future.set_exception(exc)
                batches = self.consumer.poll(timeout_ms=1000)  # a short poll also bounds the pre-rebalance commit
                held = self.ownership.holdings().get(self.name, frozenset())
                for tp, records in batches.items():
                    for r in records:
                        if tp.partition not in held:
                            self.outside_assignment.append((tp.partition, r.offset))
                        if self.consumed is not None:
                            self.consumed.add(self.name, tp.partition, r.offset)
                    time.sleep(0.004 * len(records))  # "processing": a slow application, the behaviour under test
        finally:
            self.consumer.close()  # commits, revokes, leaves the group

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not close"


def test_a_kafka_python_group_consumes_a_12_partition_topic_without_gap_or_double_ownership(broker: BrokerThread) -> None:
    bootstrap = broker.bootstrap_servers
    everything = numbered_topic(bootstrap, "events", PARTITIONS, PER_PARTITION)
    ownership, consumed = Ownership(), Consumed()
    members: dict[str, Member] = {}

    def add(name: str) -> None:
        members[name] = Member(bootstrap, "kp-group", "events", name, ownership, consumed)

    try:
        add("a")
        block_until(lambda: consumed.count() >= 100, "a consumed a little")
        add("b")
        block_until(lambda: ownership.stable_with(["a", "b"], PARTITIONS) and consumed.count() >= 250, "b took a share")
        add("c")
        block_until(lambda: ownership.stable_with(["a", "b", "c"], PARTITIONS) and consumed.count() >= 400,
                   "c took a share")
        members.pop("a").close()
        block_until(lambda: ownership.stable_with(["b", "c"], PARTITIONS), "b and c took over a's partitions")
        block_until(lambda: consumed.union() == everything, "every record was consumed")
        outside = {m.name: m.outside_assignment for m in members.values() if m.outside_assignment}
        assert not outside, f"records consumed from partitions the member did not own: {outside}"
    finally:
        for m in members.values():
            m.close()

    assert consumed.union() == everything
    ownership.assert_one_owner_per_partition(PARTITIONS)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets({"kp-group": None})["kp-group"]
    finally:
        admin.close()
    assert {tp.partition: meta.offset for tp, meta in committed.items()} == {p: PER_PARTITION for p in range(PARTITIONS)}
    duplicates = {po for po, n in Counter(po for pos in consumed.by_member.values() for po in pos).items() if n > 1}
    assert not duplicates, f"records consumed twice without a crash: {sorted(duplicates)[:20]}"


def joined_member(bootstrap: str, group_id: str, name: str, partitions: int, **options: Any) -> Member:
    ownership = Ownership()
    member = Member(bootstrap, group_id, "events", name, ownership, **options)
    block_until(lambda: ownership.stable_with([name], partitions), f"{name} joined")
    return member


def test_kafka_python_admin_lists_and_describes_a_live_group(broker: BrokerThread) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "events", 3)
    member = joined_member(bootstrap, "live", "reporting-1", 3)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert [(g["group_id"], g["protocol_type"], g["group_state"]) for g in admin.list_groups()] == [
            ("live", "consumer", "Stable")]
        described = admin.describe_groups(["live"])["live"]
        assert (described["group_state"], described["protocol_data"], described["error"]) == ("Stable", "range", None)
        (m,) = described["members"]
        assert (m["client_id"], m["client_host"], m["member_metadata"]["topics"]) == ("reporting-1", "/127.0.0.1", ["events"])
        assert m["member_assignment"]["assigned_partitions"] == [{"topic": "events", "partitions": [0, 1, 2]}]
    finally:
        admin.close()
        member.close()


def test_offset_delete_is_refused_while_the_group_consumes_the_topic_and_works_after(broker: BrokerThread) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "events", 2)
    member = joined_member(bootstrap, "g", "m", 2, enable_auto_commit=False)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        member.do(lambda consumer: consumer.commit({TopicPartition("events", 0): OffsetAndMetadata(7, "seen", -1),
                                                    TopicPartition("events", 1): OffsetAndMetadata(8, "", -1)}))
        refused = admin.delete_group_offsets("g", [TopicPartition("events", 0)])
        assert refused == {TopicPartition("events", 0): Errors.GroupSubscribedToTopicError}
        member.close()  # the group is now empty: nobody consumes the topic
        deleted = admin.delete_group_offsets("g", [TopicPartition("events", 0)])
        assert deleted == {TopicPartition("events", 0): Errors.NoError}
        remaining = admin.list_group_offsets({"g": None})["g"]
        assert {tp.partition: (om.offset, om.metadata) for tp, om in remaining.items()} == {1: (8, "")}
    finally:
        member.close()
        admin.close()
