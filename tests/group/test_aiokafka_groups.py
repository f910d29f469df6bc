"""An aiokafka consumer group against a real pulllog broker.

The members are tasks on this test's event loop; the broker runs in its own thread. Their
rebalance listeners feed an :class:`Ownership` log keyed by aiokafka's generation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from group_helpers import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    Consumed,
    Ownership,
    numbered_topic,
)
from waits import wait_until

PARTITIONS = 12
PER_PARTITION = 60


class Member(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, bootstrap: str, group_id: str, topic: str, name: str, ownership: Ownership, consumed: Consumed) -> None:
        self.name, self.topic, self.ownership, self.consumed = name, topic, ownership, consumed
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_id, client_id=name, auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=30000, auto_commit_interval_ms=500, max_poll_records=20)
        self.outside_assignment: list[tuple[int, int]] = []
        self.task: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.ownership.revoked(self.name, [tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: Any) -> None:
        generation = self.consumer._coordinator.generation  # aiokafka keeps it there
        self.ownership.assigned(self.name, generation, [tp.partition for tp in assigned])

    async def start(self) -> None:
        self.consumer.subscribe([self.topic], listener=self)
        await self.consumer.start()
        self.task = asyncio.ensure_future(self._consume())

    async def _consume(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=100)
            held = self.ownership.holdings().get(self.name, frozenset())
            for tp, records in batches.items():
                for r in records:
                    if tp.partition not in held:
                        self.outside_assignment.append((tp.partition, r.offset))
                    self.consumed.add(self.name, tp.partition, r.offset)
                await asyncio.sleep(0.004 * len(records))  # "processing": a slow application, the behaviour under test

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()  # commits, revokes, leaves the group


async def test_an_aiokafka_group_consumes_a_12_partition_topic_without_gap_or_double_ownership(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    everything = await asyncio.to_thread(numbered_topic, bootstrap, "events", PARTITIONS, PER_PARTITION)
    ownership, consumed = Ownership(), Consumed()
    members: dict[str, Member] = {}

    async def add(name: str) -> None:
        members[name] = Member(bootstrap, "aio-group", "events", name, ownership, consumed)
        await members[name].start()

    try:
        await add("a")
        await wait_until(lambda: consumed.count() >= 100, "a consumed a little")
        await add("b")
        await wait_until(lambda: ownership.stable_with(["a", "b"], PARTITIONS) and consumed.count() >= 250, "b took a share")
        await add("c")
        await wait_until(lambda: ownership.stable_with(["a", "b", "c"], PARTITIONS) and consumed.count() >= 400,
                         "c took a share")
        await members.pop("a").stop()
        await wait_until(lambda: ownership.stable_with(["b", "c"], PARTITIONS), "b and c took over a's partitions")
        await wait_until(lambda: consumed.union() == everything, "every record was consumed")
        outside = {m.name: m.outside_assignment for m in members.values() if m.outside_assignment}
        assert not outside, f"records consumed from partitions the member did not own: {outside}"
    finally:
        for m in members.values():
            await m.stop()

    assert consumed.union() == everything
    ownership.assert_one_owner_per_partition(PARTITIONS)

    checker = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="aio-group")
    await checker.start()
    try:
        committed = {p: await checker.committed(TopicPartition("events", p)) for p in range(PARTITIONS)}
    finally:
        await checker.stop()
    assert committed == {p: PER_PARTITION for p in range(PARTITIONS)}
    duplicates = {po for po, n in Counter(po for pos in consumed.by_member.values() for po in pos).items() if n > 1}
    assert not duplicates, f"records consumed twice without a crash: {sorted(duplicates)[:20]}"
