"""Offsets committed inside transactions (TxnOffsetCommit), at the coordinator's API.

A real GroupCoordinator over a real TopicManager (``__consumer_offsets`` on disk); the
transaction coordinator's part (writing the marker, then ``handle_txn_completion``) is played
by the test. Restarts build a new coordinator over the same directory and replay the log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from pulllog.broker.topics import TopicManager
from pulllog.group.coordinator import (
    OFFSETS_TOPIC,
    DeleteGroupsRequest,
    DeletedGroup,
    GroupCoordinator,
    JoinRequest,
    OffsetCommit,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionResult,
    SyncRequest,
    TxnOffsetCommitRequest,
)
from pulllog.log import Log, LogConfig
from pulllog.net.coordinator_keys import partition_for
from pulllog.purgatory import DelayedOperationPurgatory

GROUP = "billing"
PRODUCER, EPOCH = 4000, 0


@contextmanager
def _coordinator(data_dir: Path, offsets_partitions: int = 1) -> Iterator[GroupCoordinator]:
    topics = TopicManager(data_dir, LogConfig())
    topics.load()
    coordinator = GroupCoordinator(topics, DelayedOperationPurgatory("Rebalance"),
                                   offsets_partitions=offsets_partitions)
    coordinator.load()
    try:
        yield coordinator
    finally:
        coordinator.shutdown()
        topics.close()


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[GroupCoordinator]:
    with _coordinator(tmp_path) as c:
        yield c


def _txn_commit(coordinator: GroupCoordinator, offsets: dict[tuple[str, int], int], *, group: str = GROUP,
                producer_id: int = PRODUCER, epoch: int = EPOCH, generation: int = -1, member_id: str = "",
                instance_id: str | None = None) -> list[ErrorCode]:
    result = coordinator.txn_offset_commit(TxnOffsetCommitRequest(
        "txn-1", group, producer_id, epoch, generation, member_id, instance_id,
        tuple(OffsetCommit(t, p, o, -1, f"at {o}") for (t, p), o in offsets.items())))
    assert [(r.topic, r.partition) for r in result.partitions] == list(offsets)
    return [r.error for r in result.partitions]


def _commit(coordinator: GroupCoordinator, offsets: dict[tuple[str, int], int], group: str = GROUP) -> None:
    result = coordinator.commit_offsets(OffsetCommitRequest(
        group, -1, "", None, tuple(OffsetCommit(t, p, o, -1, None) for (t, p), o in offsets.items())))
    assert all(r.error is ErrorCode.none for r in result.partitions)


def _fetched(coordinator: GroupCoordinator, *tps: tuple[str, int], group: str = GROUP,
             require_stable: bool = False) -> list[int | ErrorCode]:
    """Each partition's committed offset (-1 for none), or its error code."""
    result = coordinator.fetch_offsets(OffsetFetchRequest(group, tps, require_stable))
    return [f.error if f.error is not ErrorCode.none else (f.committed.offset if f.committed else -1)
            for f in result.partitions]


def _offsets_log(coordinator: GroupCoordinator, group: str = GROUP) -> Log:
    logs = coordinator.topics.partition_logs(OFFSETS_TOPIC)
    assert logs is not None
    return logs[partition_for(group, len(logs))]


def _end_txn(coordinator: GroupCoordinator, commit: bool, *, group: str = GROUP, producer_id: int = PRODUCER,
             epoch: int = EPOCH) -> None:
    """What the transaction coordinator does: the marker, then the group coordinator is told."""
    plog = _offsets_log(coordinator, group)
    plog.write_txn_marker(producer_id, epoch, commit, coordinator_epoch=0)
    coordinator.handle_txn_completion(producer_id, [partition_for(group, coordinator.offsets_partitions)],
                                      commit)


A0, A1 = ("orders", 0), ("orders", 1)


async def test_pending_offsets_are_invisible_until_the_transaction_commits(coordinator: GroupCoordinator) -> None:
    _commit(coordinator, {A0: 5})
    assert _txn_commit(coordinator, {A0: 10, A1: 20}) == [ErrorCode.none, ErrorCode.none]
    assert _fetched(coordinator, A0, A1) == [5, -1]
    assert _fetched(coordinator, A0, A1, require_stable=True) == [ErrorCode.unstable_offset_commit] * 2
    assert _fetched(coordinator, ("orders", 2), require_stable=True) == [-1]
    # Every partition of the group: pending ones are not listed (and not unstable) unless committed.
    everything = coordinator.fetch_offsets(OffsetFetchRequest(GROUP, None, require_stable=True))
    assert [(f.topic, f.partition, f.error) for f in everything.partitions] == \
        [("orders", 0, ErrorCode.unstable_offset_commit)]

    _end_txn(coordinator, commit=True)
    assert _fetched(coordinator, A0, A1, require_stable=True) == [10, 20]


async def test_an_aborted_transaction_leaves_the_committed_offsets(coordinator: GroupCoordinator) -> None:
    _commit(coordinator, {A0: 5})
    _txn_commit(coordinator, {A0: 10, A1: 20})
    _end_txn(coordinator, commit=False)
    assert _fetched(coordinator, A0, A1, require_stable=True) == [5, -1]


async def test_one_producer_commits_offsets_several_times_and_in_successive_transactions(
        coordinator: GroupCoordinator) -> None:
    # Each append continues the producer's sequence: none may be mistaken for a retry.
    assert _txn_commit(coordinator, {A0: 1}) == [ErrorCode.none]
    assert _txn_commit(coordinator, {A0: 2}) == [ErrorCode.none]
    _end_txn(coordinator, commit=True)
    assert _txn_commit(coordinator, {A0: 3}) == [ErrorCode.none]
    _end_txn(coordinator, commit=True)
    assert _txn_commit(coordinator, {A0: 4}, epoch=EPOCH + 1) == [ErrorCode.none]
    _end_txn(coordinator, commit=False, epoch=EPOCH + 1)
    assert _fetched(coordinator, A0) == [3]
    assert _offsets_log(coordinator).log_end_offset == 7  # 4 commits + 3 markers, nothing lost


async def test_a_fenced_epoch_cannot_commit_offsets(coordinator: GroupCoordinator) -> None:
    assert _txn_commit(coordinator, {A0: 1}, epoch=3) == [ErrorCode.none]
    assert _txn_commit(coordinator, {A0: 2}, epoch=2) == [ErrorCode.invalid_producer_epoch]
    _end_txn(coordinator, commit=True, epoch=3)
    assert _fetched(coordinator, A0) == [1]


async def test_the_later_record_wins_between_a_transaction_and_a_plain_commit(coordinator: GroupCoordinator) -> None:
    _txn_commit(coordinator, {A0: 10, A1: 11})
    _commit(coordinator, {A0: 7})  # after the transaction's record: stays when the transaction commits
    _end_txn(coordinator, commit=True)
    assert _fetched(coordinator, A0, A1) == [7, 11]
    _commit(coordinator, {A0: 8})
    _txn_commit(coordinator, {A0: 12})  # after the plain commit: replaces it
    _end_txn(coordinator, commit=True)
    assert _fetched(coordinator, A0) == [12]


async def test_completion_touches_only_the_marked_offsets_partitions(tmp_path: Path) -> None:
    with _coordinator(tmp_path, offsets_partitions=4) as coordinator:
        _commit(coordinator, {A0: 1})  # creates __consumer_offsets
        groups = ["g-0", "g-1", "g-2", "g-3", "g-4", "g-5"]
        other = next(g for g in groups if partition_for(g, 4) != partition_for(GROUP, 4))
        _txn_commit(coordinator, {A0: 10})
        _txn_commit(coordinator, {A0: 20}, group=other)
        coordinator.handle_txn_completion(PRODUCER, [partition_for(GROUP, 4)], True)
        assert _fetched(coordinator, A0, require_stable=True) == [10]
        assert _fetched(coordinator, A0, group=other, require_stable=True) == [ErrorCode.unstable_offset_commit]
        coordinator.handle_txn_completion(PRODUCER, [partition_for(other, 4)], True)
        assert _fetched(coordinator, A0, group=other) == [20]


async def test_replay_keeps_pending_offsets_pending_and_applies_markers(tmp_path: Path) -> None:
    with _coordinator(tmp_path) as coordinator:
        _commit(coordinator, {A0: 5}, group="committed")
        _commit(coordinator, {A0: 5}, group="aborted")
        _commit(coordinator, {A0: 5}, group="open")
        _txn_commit(coordinator, {A0: 10}, group="committed", producer_id=1)
        _txn_commit(coordinator, {A0: 10}, group="aborted", producer_id=2)
        _txn_commit(coordinator, {A0: 10}, group="open", producer_id=3)
        _end_txn(coordinator, commit=True, group="committed", producer_id=1)
        _end_txn(coordinator, commit=False, group="aborted", producer_id=2)
    with _coordinator(tmp_path) as coordinator:
        assert _fetched(coordinator, A0, group="committed", require_stable=True) == [10]
        assert _fetched(coordinator, A0, group="aborted", require_stable=True) == [5]
        assert _fetched(coordinator, A0, group="open") == [5]
        assert _fetched(coordinator, A0, group="open", require_stable=True) == [ErrorCode.unstable_offset_commit]
        # The transaction coordinator completes it after its own restart.
        _end_txn(coordinator, commit=True, group="open", producer_id=3)
        assert _fetched(coordinator, A0, group="open", require_stable=True) == [10]
    with _coordinator(tmp_path) as coordinator:
        assert _fetched(coordinator, A0, group="open", require_stable=True) == [10]


async def test_replay_agrees_with_the_live_rule_for_the_later_record(tmp_path: Path) -> None:
    with _coordinator(tmp_path) as coordinator:
        _txn_commit(coordinator, {A0: 10, A1: 11})
        _commit(coordinator, {A0: 7})
        _end_txn(coordinator, commit=True)
        live = _fetched(coordinator, A0, A1)
    with _coordinator(tmp_path) as coordinator:
        assert _fetched(coordinator, A0, A1) == live == [7, 11]


async def test_deleting_offsets_or_the_group_drops_pending_offsets(tmp_path: Path) -> None:
    with _coordinator(tmp_path) as coordinator:
        _txn_commit(coordinator, {A0: 10, A1: 11})
        deleted = coordinator.delete_offsets(OffsetDeleteRequest(GROUP, (A0,)))
        assert deleted.partitions == (PartitionResult("orders", 0, ErrorCode.none),)
        assert _fetched(coordinator, A0, A1, require_stable=True) == [-1, ErrorCode.unstable_offset_commit]
        _txn_commit(coordinator, {A0: 12}, group="other", producer_id=7)
        assert coordinator.delete_groups(DeleteGroupsRequest(("other",))).groups == \
            (DeletedGroup("other", ErrorCode.none),)
        _end_txn(coordinator, commit=True)
        _end_txn(coordinator, commit=True, group="other", producer_id=7)
        assert _fetched(coordinator, A0, A1) == [-1, 11]
        assert _fetched(coordinator, A0, group="other") == [-1]
    with _coordinator(tmp_path) as coordinator:
        assert _fetched(coordinator, A0, A1) == [-1, 11]
        assert _fetched(coordinator, A0, group="other") == [-1]


async def test_offsets_with_a_pending_transaction_do_not_expire(coordinator: GroupCoordinator) -> None:
    _commit(coordinator, {A0: 5, A1: 6})
    _txn_commit(coordinator, {A0: 10})
    far_future = coordinator.clock() + coordinator.offsets_retention_ms + 60_000
    assert coordinator.expire_offsets(far_future) == 1  # A1 only
    assert _fetched(coordinator, A0, A1) == [5, -1]
    _end_txn(coordinator, commit=True)
    assert _fetched(coordinator, A0) == [10]


async def _stable_member(coordinator: GroupCoordinator, instance_id: str | None = None) -> tuple[str, int]:
    joined = await coordinator.join(JoinRequest(
        GROUP, "", instance_id, "client-1", "127.0.0.1", 10_000, 10_000, "consumer", (("range", b""),),
        require_known_member_id=False))
    assert joined.error is ErrorCode.none
    await coordinator.sync(SyncRequest(GROUP, joined.generation, joined.member_id, instance_id, {}))
    return joined.member_id, joined.generation


async def test_members_are_checked_as_kafka_checks_them(coordinator: GroupCoordinator) -> None:
    # No group yet: generation -1 creates a simple group, a real generation is stale.
    assert _txn_commit(coordinator, {A0: 1}, group="fresh", generation=3, member_id="m") == \
        [ErrorCode.illegal_generation]
    assert _txn_commit(coordinator, {A0: 1}, group="fresh") == [ErrorCode.none]
    assert _txn_commit(coordinator, {A0: 1}, group="") == [ErrorCode.invalid_group_id]

    member, generation = await _stable_member(coordinator, instance_id="instance-1")
    ok = dict(generation=generation, member_id=member, instance_id="instance-1")
    assert _txn_commit(coordinator, {A0: 2}, **ok) == [ErrorCode.none]  # type: ignore[arg-type]
    assert _txn_commit(coordinator, {A0: 2}, generation=generation + 1, member_id=member,
                       instance_id="instance-1") == [ErrorCode.illegal_generation]
    assert _txn_commit(coordinator, {A0: 2}, generation=generation, member_id="stranger") == \
        [ErrorCode.unknown_member_id]
    assert _txn_commit(coordinator, {A0: 2}, generation=generation, member_id="old-incarnation",
                       instance_id="instance-1") == [ErrorCode.fenced_instance_id]
    # v0-v2 send no member id and generation: accepted into a group that has members.
    assert _txn_commit(coordinator, {A0: 3}) == [ErrorCode.none]
    # Too much metadata: that partition alone is refused.
    result = coordinator.txn_offset_commit(TxnOffsetCommitRequest(
        "txn-1", GROUP, PRODUCER, EPOCH, -1, "", None,
        (OffsetCommit("orders", 0, 4, -1, "x" * 5000), OffsetCommit("orders", 1, 4, -1, None))))
    assert [r.error for r in result.partitions] == [ErrorCode.offset_metadata_too_large, ErrorCode.none]
