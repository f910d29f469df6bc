"""TxnOffsetCommit (28) and OffsetFetch's require_stable at the protocol level.

A real broker, driven with exact requests (:class:`WireClient`) in every version pulllog
serves. The transaction's end (the marker in ``__consumer_offsets``, then the group
coordinator told) is played on the broker's loop, as the transaction coordinator does it.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import on_broker

from pulllog.broker.broker import Broker
from pulllog.group import records as rec
from pulllog.group.coordinator import OFFSETS_TOPIC
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

TOPIC, GROUP = "orders", "billing"
PRODUCER, EPOCH = 9000, 0


def _create_topic(client: WireClient, name: str, partitions: int) -> None:
    answer = client.call("create_topics", 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
    assert answer.topics[0].error_code == ErrorCode.none


def _txn_offset_commit(client: WireClient, version: int, offsets: dict[tuple[str, int], int], *,
                       group: str = GROUP, generation: int = -1, member_id: str = "",
                       instance_id: str | None = None) -> dict[tuple[str, int], ErrorCode]:
    answer = client.call("txn_offset_commit", version, {
        "transactional_id": "txn-1", "group_id": group, "producer_id": PRODUCER, "producer_epoch": EPOCH,
        "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                               "committed_leader_epoch": -1, "committed_metadata": "m"}]}
                   for (t, p), o in offsets.items()],
    })
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


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


def _end_transaction(broker: BrokerThread, commit: bool, group: str = GROUP) -> None:
    """What the transaction coordinator does: the marker into the group's offsets partition,
    then the group coordinator is told."""
    def end(b: Broker) -> None:
        logs = b.topics.partition_logs(OFFSETS_TOPIC)
        assert logs is not None
        index = rec.partition_for(group, len(logs))
        marker = build_batch([(struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))],
                             producer_id=PRODUCER, producer_epoch=EPOCH, transactional=True, control=True)
        logs[index].append(marker)
        b.groups.handle_txn_completion(PRODUCER, [index], commit)
    on_broker(broker, end)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with BrokerThread(tmp_path / "data") as b:
        yield b


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offsets_stay_pending_until_the_transaction_commits(broker: BrokerThread, version: int) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 2)
        committed = client.call("offset_commit", 8, {
            "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        assert _txn_offset_commit(client, version, {(TOPIC, 0): 10, (TOPIC, 1): 20, ("ghost", 0): 1}) == {
            (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none,
            ("ghost", 0): ErrorCode.unknown_topic_or_partition}
        # Before v7 there is no require_stable: the last committed offsets.
        assert _offset_fetch(client, 6, [0, 1], require_stable=False) == [(5, ErrorCode.none), (-1, ErrorCode.none)]
        for fetch_version in (7, 8, 9):
            assert _offset_fetch(client, fetch_version, [0, 1], require_stable=False) == \
                [(5, ErrorCode.none), (-1, ErrorCode.none)]
            assert _offset_fetch(client, fetch_version, [0, 1], require_stable=True) == \
                [(-1, ErrorCode.unstable_offset_commit)] * 2
        _end_transaction(broker, commit=True)
        assert _offset_fetch(client, 8, [0, 1], require_stable=True) == [(10, ErrorCode.none), (20, ErrorCode.none)]


def test_v3_checks_the_member_and_generation(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        tp = (TOPIC, 0)
        assert _txn_offset_commit(client, 3, {tp: 1}, group="absent", generation=4, member_id="m") == \
            {tp: ErrorCode.illegal_generation}
        assert _txn_offset_commit(client, 3, {tp: 1}) == {tp: ErrorCode.none}  # a simple group
        assert _txn_offset_commit(client, 3, {tp: 2}, generation=0, member_id="stranger") == \
            {tp: ErrorCode.unknown_member_id}
        assert _txn_offset_commit(client, 4, {tp: 2}, generation=0, member_id="m",
                                  instance_id="instance-1") == {tp: ErrorCode.unknown_member_id}
        assert _txn_offset_commit(client, 2, {tp: 1}, group="") == {tp: ErrorCode.invalid_group_id}


def test_an_aborted_transaction_and_a_restart_with_one_still_open(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        _create_topic(client, TOPIC, 1)
        assert _txn_offset_commit(client, 3, {(TOPIC, 0): 10}) == {(TOPIC, 0): ErrorCode.none}
        _end_transaction(broker, commit=False)
        assert _offset_fetch(client, 7, [0], require_stable=True) == [(-1, ErrorCode.none)]
        assert _txn_offset_commit(client, 3, {(TOPIC, 0): 11}) == {(TOPIC, 0): ErrorCode.none}
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        # No marker in the log: still pending after the restart.
        assert _offset_fetch(client, 7, [0], require_stable=True) == [(-1, ErrorCode.unstable_offset_commit)]
        _end_transaction(broker, commit=True)
        assert _offset_fetch(client, 7, [0], require_stable=True) == [(11, ErrorCode.none)]
