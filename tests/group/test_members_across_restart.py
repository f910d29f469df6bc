"""A consumer group's members across a broker restart, with real clients (pulllog's Consumer
and librdkafka's, in one group).

Kafka's group coordinator loads each group's metadata record from ``__consumer_offsets`` at
start (generation, protocol, leader, members with their assignments and timeouts) and starts
every member's session anew; so the members of a Stable group that go on heartbeating keep
their generation and partitions, and a member that does not come back is removed after its
session timeout and the group rebalances. The broker restarts on the same port and data
directory while the members run on.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from group_helpers import (
    CONFLUENT_GROUP_TIMINGS,
    MemberProcess,
    Ownership,
    numbered_topic,
)
from waits import (
    group_generation,
    group_members,
    group_state,
    on_broker,
    session_timer,
    wait_until,
)

from pulllog.client.consumer import Consumer
from pulllog.testing import BrokerThread

GROUP, TOPIC, PARTITIONS = "restarted", "events", 4
SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS = CONFLUENT_GROUP_TIMINGS["session.timeout.ms"], 500


class PulllogMember:
    """pulllog's Consumer in this event loop, reading in a task it owns."""

    def __init__(self, bootstrap: str, ownership: Ownership) -> None:
        self.ownership = ownership
        self.consumer = Consumer(bootstrap, group_id=GROUP, client_id="pulllog-member",
                                 session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                                 rebalance_timeout_ms=30_000, auto_offset_reset="earliest",
                                 on_partitions_revoked=self._revoked, on_partitions_assigned=self._assigned)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> PulllogMember:
        await self.consumer.start()
        self.consumer.subscribe([TOPIC])
        self.task = asyncio.create_task(self._read())
        return self

    def _revoked(self, revoked: set[Any]) -> None:
        self.ownership.revoked("pulllog", [tp.partition for tp in revoked])

    def _assigned(self, assigned: set[Any]) -> None:
        generation = self.consumer.group_metadata().generation_id
        self.ownership.assigned("pulllog", generation, [tp.partition for tp in assigned])

    async def _read(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=100)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.close()


def _member_ids(broker: BrokerThread) -> list[str]:
    return on_broker(broker, lambda b: list(b.groups.groups[GROUP].members))


async def _stable_group(broker: BrokerThread, ownership: Ownership) -> tuple[PulllogMember, MemberProcess, int]:
    bootstrap = broker.bootstrap_servers
    numbered_topic(bootstrap, TOPIC, PARTITIONS, 3)
    pulllog = await PulllogMember(bootstrap, ownership).start()
    # librdkafka's reconnect backoff doubles up to 10 s while the broker is down: kept below the
    # session timeout, which the restarted coordinator starts for each member it loads.
    rdkafka = MemberProcess("rdkafka", {"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": "rdkafka-member",
                                        "auto.offset.reset": "earliest", "reconnect.backoff.max.ms": 1000,
                                        **CONFLUENT_GROUP_TIMINGS}, TOPIC, ownership=ownership)
    generation = await wait_until(lambda: ownership.stable_with(["pulllog", "rdkafka"], PARTITIONS),
                                  "both members own partitions")
    assert (group_state(broker, GROUP), group_generation(broker, GROUP)) == ("Stable", generation)
    return pulllog, rdkafka, generation


async def _heard_from(broker: BrokerThread, member_id: str, times: int) -> None:
    """Wait until the member's session timer was replaced ``times`` times (each heartbeat,
    join or commit replaces it): the member has talked to the restarted coordinator."""
    for _ in range(times):
        timer = session_timer(broker, GROUP, member_id)
        await wait_until(lambda timer=timer: session_timer(broker, GROUP, member_id) is not timer,
                         f"member {member_id} talks to the restarted coordinator")


async def test_members_that_heartbeat_across_a_broker_restart_keep_their_generation(tmp_path: Path) -> None:
    ownership = Ownership()
    broker = BrokerThread(tmp_path / "data").start()
    pulllog = rdkafka = None
    try:
        pulllog, rdkafka, generation = await _stable_group(broker, ownership)
        members, port = sorted(_member_ids(broker)), broker.port
        broker.stop()
        broker = BrokerThread(tmp_path / "data", port=port).start()
        assert (group_state(broker, GROUP), group_generation(broker, GROUP)) == ("Stable", generation)
        assert sorted(_member_ids(broker)) == members
        for member_id in members:
            await _heard_from(broker, member_id, times=3)
        assert (group_state(broker, GROUP), group_generation(broker, GROUP), sorted(_member_ids(broker))) \
            == ("Stable", generation, members)
        assert ownership.latest()[0] == generation  # no member was handed a new generation
    finally:
        if rdkafka is not None and rdkafka.proc.poll() is None:
            rdkafka.kill()
        if pulllog is not None:
            await pulllog.stop()
        broker.stop()


async def test_a_member_gone_during_a_broker_restart_is_expired_and_the_group_rebalances(tmp_path: Path) -> None:
    ownership = Ownership()
    broker = BrokerThread(tmp_path / "data").start()
    pulllog = rdkafka = None
    try:
        pulllog, rdkafka, generation = await _stable_group(broker, ownership)
        port = broker.port
        broker.stop()
        rdkafka.kill()  # while the broker is down: it never leaves, it just does not come back
        broker = BrokerThread(tmp_path / "data", port=port).start()
        assert group_members(broker, GROUP) == 2
        later = await wait_until(lambda: ownership.stable_with(["pulllog"], PARTITIONS),
                                 "the member left alone owns every partition")
        assert later == generation + 1
        assert (group_state(broker, GROUP), group_generation(broker, GROUP), group_members(broker, GROUP)) \
            == ("Stable", generation + 1, 1)
    finally:
        if rdkafka is not None and rdkafka.proc.poll() is None:
            rdkafka.kill()
        if pulllog is not None:
            await pulllog.stop()
        broker.stop()
