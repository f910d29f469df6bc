"""TxnOffsetCommit (28) and OffsetFetch's require_stable at the protocol level.

A real broker, driven with exact requests (:class:`WireClient`) as a transactional producer
sends them: InitProducerId with a transactional id, AddOffsetsToTxn, TxnOffsetCommit (in every
version pulllog serves), EndTxn, which writes the markers and tells the group coordinator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until

from pulllog.testing import BrokerThread

TOPIC, GROUP = "orders", "billing"
# One partition each for the internal topics: 50 directories per test would be most of its time.
PROPERTIES = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


class WireTxn:
    """One transactional producer, speaking the protocol by hand."""

    def __init__(self, client: WireClient, transactional_id: str = "txn-1") -> None:
        self.client, self.transactional_id = client, transactional_id

        def init() -> Any:
            answer = client.call("init_producer_id", 4, {
                "transactional_id": transactional_id, "transaction_timeout": 60_000,
                "producer_id": -1, "producer_epoch": -1})
            # While an older instance's transaction is being aborted: retry, as clients do.
            return None if answer.error_code == ErrorCode.concurrent_transactions else answer

        answer = block_until(init, f"InitProducerId for {transactional_id!r}")
        assert answer.error_code == ErrorCode.none
        self.producer_id, self.epoch = int(answer.producer_id), int(answer.producer_epoch)

    def add_offsets(self, group: str = GROUP) -> None:
        answer = self.client.call("add_offsets_to_txn", 3, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "group_id": group})
        assert answer.error_code == ErrorCode.none

    def commit_offsets(self, version: int, offsets: dict[tuple[str, int], int], *, group: str = GROUP,
                       generation: int = -1, member_id: str = "",
                       instance_id: str | None = None) -> dict[tuple[str, int], ErrorCode]:
        answer = self.client.call("txn_offset_commit", version, {
            "transactional_id": self.transactional_id, "group_id": group, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance_id,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": "m"}]}
                       for (t, p), o in offsets.items()],
        })
        return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}

    def end(self, commit: bool) -> None:
        answer = self.client.call("end_txn", 3, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": commit})
        assert answer.error_code == ErrorCode.none


def _create_topic(client: WireClient, name: str, partitions: int) -> None:
    answer = client.call("create_topics", 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
    assert answer.topics[0].error_code == ErrorCode.none


def _commit(client: WireClient, partition: int, offset: int) -> None:
    committed = client.call("offset_commit", 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none


def _offset_fetch(client: WireClient, version: int, partitions: list[int], *, require_stable: bool,
                  group: str = GROUP) -> list[tuple[int, ErrorCode]]:
    topics = [{"name": TOPIC, "partition_indexes": partitions}]
    if version >= 8:
        answer = client.call("offset_fetch", version, {
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
            "require_stable": require_stable})
        found = answer.groups[0].topics
    else:
        answer = client.call("offset_fetch", version, {"group_id": group, "topics": topics,
                                                       "require_stable": require_stable})
        found = answer.topics
    return [(p.committed_offset, p.error_code) for t in found for p in t.partitions]


def _stable(client: WireClient, partitions: list[int]) -> list[tuple[int, ErrorCode]] | None:
    """The offsets once no partition is UNSTABLE_OFFSET_COMMIT (None before)."""
    found = _offset_fetch(client, 7, partitions, require_stable=True)
    return None if any(code == ErrorCode.unstable_offset_commit for _, code in found) else found


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with BrokerThread(tmp_path / "data", properties=PROPERTIES) as b:
        yield b


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offsets_stay_pending_until_the_transaction_commits(broker: BrokerThread, version: int) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 2)
        _commit(client, 0, 5)
        txn = WireTxn(client)
        txn.add_offsets()
        assert txn.commit_offsets(version, {(TOPIC, 0): 10, (TOPIC, 1): 20, ("ghost", 0): 1}) == {
            (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none,
            ("ghost", 0): ErrorCode.unknown_topic_or_partition}
        # Before v7 there is no require_stable: the last committed offsets.
        assert _offset_fetch(client, 6, [0, 1], require_stable=False) == [(5, ErrorCode.none), (-1, ErrorCode.none)]
        for fetch_version in (7, 8, 9):
            assert _offset_fetch(client, fetch_version, [0, 1], require_stable=False) == \
                [(5, ErrorCode.none), (-1, ErrorCode.none)]
            assert _offset_fetch(client, fetch_version, [0, 1], require_stable=True) == \
                [(-1, ErrorCode.unstable_offset_commit)] * 2
        txn.end(commit=True)
        assert block_until(lambda: _stable(client, [0, 1]), "the transaction's offsets are stable") == [(10, ErrorCode.none), (20, ErrorCode.none)]


def test_an_aborted_transaction_leaves_the_committed_offsets(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        _commit(client, 0, 5)
        txn = WireTxn(client)
        txn.add_offsets()
        assert txn.commit_offsets(3, {(TOPIC, 0): 10}) == {(TOPIC, 0): ErrorCode.none}
        txn.end(commit=False)
        assert block_until(lambda: _stable(client, [0]), "the transaction's offsets are stable") == [(5, ErrorCode.none)]


def test_offsets_need_the_group_in_the_transaction_and_a_current_epoch(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        tp = (TOPIC, 0)
        txn = WireTxn(client)
        # No AddOffsetsToTxn: the group's offsets partition is not in the transaction (KIP-890).
        assert txn.commit_offsets(3, {tp: 1}) == {tp: ErrorCode.invalid_txn_state}
        assert txn.commit_offsets(4, {tp: 1}) == {tp: ErrorCode.transaction_abortable}
        txn.add_offsets()
        assert txn.commit_offsets(4, {tp: 1}) == {tp: ErrorCode.none}
        WireTxn(client)  # a new instance with the same transactional id fences this one
        assert txn.commit_offsets(3, {tp: 2}) == {tp: ErrorCode.invalid_producer_epoch}
        assert _offset_fetch(client, 7, [0], require_stable=True) == [(-1, ErrorCode.none)]  # aborted by the fencing


def test_v3_checks_the_member_and_generation(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        tp = (TOPIC, 0)
        txn = WireTxn(client)
        txn.add_offsets("absent")
        assert txn.commit_offsets(3, {tp: 1}, group="absent", generation=4, member_id="m") == \
            {tp: ErrorCode.illegal_generation}
        txn.add_offsets()
        assert txn.commit_offsets(3, {tp: 1}) == {tp: ErrorCode.none}  # a simple group
        assert txn.commit_offsets(3, {tp: 2}, generation=0, member_id="stranger") == {tp: ErrorCode.unknown_member_id}
        assert txn.commit_offsets(4, {tp: 2}, generation=0, member_id="m", instance_id="instance-1") == \
            {tp: ErrorCode.unknown_member_id}


def test_a_transaction_open_across_a_restart_commits_its_offsets_after(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data, properties=PROPERTIES) as broker, WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        txn = WireTxn(client)
        txn.add_offsets()
        assert txn.commit_offsets(3, {(TOPIC, 0): 11}) == {(TOPIC, 0): ErrorCode.none}
    with BrokerThread(data, properties=PROPERTIES) as broker, WireClient(broker.port) as client:
        # No marker in the log: still pending after the restart, until the transaction ends.
        assert _offset_fetch(client, 7, [0], require_stable=True) == [(-1, ErrorCode.unstable_offset_commit)]
        txn.client = client
        txn.end(commit=True)
        assert block_until(lambda: _stable(client, [0]), "the transaction's offsets are stable") == [(11, ErrorCode.none)]
