"""A coordinator partition whose leadership just arrived answers COORDINATOR_LOAD_IN_PROGRESS
until its load has finished, as Kafka's coordinators do (issue 16), not the empty state of a
partition not yet read.

The broker runs in the test's process (a ZooKeeper cluster member of its own chroot), so the
test can hold its loads back with ``broker.coordinator_load_hook``, set before it starts: a
restart makes it the leader of ``__consumer_offsets`` and ``__transaction_state`` again, and
the loads wait until the test releases them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import zk_cluster
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until

from pulllog.broker import Broker
from pulllog.testing import BrokerThread

GROUP, TXN_ID, TOPIC = "g", "tx", "t"
LOAD_IN_PROGRESS = ErrorCode.coordinator_load_in_progress


class HeldLoads:
    """The hook: records each partition whose load waits, and lets them all go at release()."""

    def __init__(self) -> None:
        self.waiting: set[tuple[str, int]] = set()
        self._go: asyncio.Event | None = None

    async def hook(self, key: tuple[str, int]) -> None:
        if self._go is None:
            self._go = asyncio.Event()  # on the broker's loop
        self.waiting.add(key)
        await self._go.wait()

    def release(self) -> None:  # on the broker's loop (BrokerThread.call)
        if self._go is None:
            self._go = asyncio.Event()
        self._go.set()


class HeldBrokerThread(BrokerThread):
    """A BrokerThread whose broker has the hook before it serves (and so before any view)."""

    def __init__(self, data_dir: Path, held: HeldLoads, **options: Any) -> None:
        super().__init__(data_dir, **options)
        self.held = held

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.broker = Broker(data_dir=self.data_dir, **self.options)
        self.broker.coordinator_load_hook = self.held.hook
        ready: asyncio.Future[Broker] = self._loop.create_future()
        ready.add_done_callback(self._on_ready)
        await self.broker.serve(ready=ready)


def _find(client: WireClient, key: str, key_type: int) -> tuple[int, int]:
    answer = client.call("find_coordinator", 4, {"key_type": key_type, "coordinator_keys": [key]})
    found = answer.coordinators[0]
    return int(found.error_code), int(found.node_id)


def _offset_fetch(client: WireClient) -> tuple[int, int | None]:
    """(the group's error code, the committed offset of t-0 or None)."""
    answer = client.call("offset_fetch", 8, {"groups": [
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}], "require_stable": False})
    group = answer.groups[0]
    offsets = [p.committed_offset for t in group.topics for p in t.partitions]
    return int(group.error_code), (offsets[0] if offsets else None)


def _init_producer_id(client: WireClient) -> tuple[int, int, int]:
    answer = client.call("init_producer_id", 4, {"transactional_id": TXN_ID, "transaction_timeout": 60_000,
                                                 "producer_id": -1, "producer_epoch": -1})
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def _join(client: WireClient) -> int:
    answer = client.call("join_group", 5, {
        "group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    return int(answer.error_code)


def test_a_new_coordinator_answers_load_in_progress_until_its_partition_is_loaded(
        zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> None:
    properties = {
        "zookeeper.connect": f"{zookeeper.connect}/loading-{uuid.uuid4().hex[:8]}", "broker.id": "1",
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0"}
    with BrokerThread(tmp_path / "data", properties=properties) as broker, WireClient(broker.port) as client:
        client.call("create_topics", 7, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": [], "configs": []}],
                                         "timeout_ms": 30_000, "validate_only": False})
        block_until(lambda: _find(client, GROUP, 0) == (0, 1), "the group's coordinator is elected")
        client.call("offset_commit", 8, {
            "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                       "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        assert _offset_fetch(client) == (0, 42)
        block_until(lambda: _find(client, TXN_ID, 1) == (0, 1), "the transactional id's coordinator is elected")
        first = block_until(lambda: (a := _init_producer_id(client))[0] == 0 and a, "the transactional id is known")

    held = HeldLoads()
    with HeldBrokerThread(tmp_path / "data", held, properties=properties) as broker, \
            WireClient(broker.port) as client:
        block_until(lambda: broker.call(lambda: set(held.waiting)) == {("__consumer_offsets", 0)},
                    "the restarted broker leads __consumer_offsets-0 and its load waits")
        # The group's coordinator is named (this broker leads the partition), but its state is
        # not read yet: every group request is told to retry, none sees an empty group.
        assert _find(client, GROUP, 0) == (0, 1)
        assert _offset_fetch(client)[0] == LOAD_IN_PROGRESS
        assert _join(client) == LOAD_IN_PROGRESS
        # The transaction state loads after the offsets (its completions commit offsets).
        assert _init_producer_id(client)[0] in (LOAD_IN_PROGRESS, ErrorCode.not_coordinator)
        broker.call(held.release)
        assert block_until(lambda: (a := _offset_fetch(client))[0] == 0 and a, "the groups are loaded") == (0, 42)
        _code, producer_id, epoch = block_until(lambda: (a := _init_producer_id(client))[0] == 0 and a,
                                               "the transactional ids are loaded")
        assert ("__transaction_state", 0) in broker.call(lambda: set(held.waiting))
        # Loaded, not empty: the same producer id in the next epoch.
        assert (producer_id, epoch) == (first[1], first[2] + 1)
