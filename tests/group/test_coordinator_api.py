"""The coordinator's API as handlers see it: one method per Kafka group API, each taking a frozen
request dataclass and answering a frozen result dataclass, in the request's order.

Runs a real GroupCoordinator over a real TopicManager (``__consumer_offsets`` on disk); no wire.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from pulllog.broker.api import GroupCoordinatorApi
from pulllog.broker.topics import TopicManager
from pulllog.group.coordinator import (
    DeleteGroupsRequest,
    DeletedGroup,
    DescribeGroupsRequest,
    FetchedOffset,
    GroupCoordinator,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    LeaveGroupRequest,
    LeftMember,
    ListGroupsRequest,
    MemberIdentity,
    OffsetCommit,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    PartitionResult,
    SyncRequest,
)
from pulllog.log import LogConfig
from pulllog.purgatory import DelayedOperationPurgatory

GROUP = "billing"


# Not a Kafka API: the transaction coordinator's call once its marker is in __consumer_offsets.
CALLBACKS = {"handle_txn_completion"}


def _api_methods() -> list[str]:
    return [name for name, _ in inspect.getmembers(GroupCoordinatorApi, inspect.isfunction)
            if not name.startswith("_") and name not in CALLBACKS]


def test_every_coordinator_api_method_takes_a_request_and_answers_a_result() -> None:
    methods = _api_methods()
    assert {"heartbeat", "leave", "fetch_offsets", "delete_offsets", "commit_offsets", "describe",
            "list_groups", "delete_groups", "txn_offset_commit"} <= set(methods)
    for name in methods:
        hints = typing.get_type_hints(getattr(GroupCoordinator, name))
        params = [p for p in inspect.signature(getattr(GroupCoordinator, name)).parameters if p != "self"]
        assert params == ["request"], name
        request, result = hints["request"], hints["return"]
        assert request.__name__.endswith("Request") and result.__name__.endswith("Result"), name
        for cls in (request, result):
            assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[GroupCoordinator]:
    topics = TopicManager(tmp_path, LogConfig())
    topics.load()
    coordinator = GroupCoordinator(topics, DelayedOperationPurgatory("Rebalance"), offsets_partitions=1)
    try:
        yield coordinator
    finally:
        coordinator.shutdown()
        topics.close()


async def _stable_member(coordinator: GroupCoordinator) -> tuple[str, int]:
    joined = await coordinator.join(JoinRequest(
        GROUP, "", None, "client-1", "127.0.0.1", 10_000, 10_000, "custom", (("proto", b"meta"),),
        require_known_member_id=False))
    assert joined.error is ErrorCode.none
    synced = await coordinator.sync(SyncRequest(GROUP, joined.generation, joined.member_id, None,
                                                {joined.member_id: b"assigned"}))
    assert synced.assignment == b"assigned"
    return joined.member_id, joined.generation


async def test_a_member_heartbeats_commits_fetches_and_leaves(coordinator: GroupCoordinator) -> None:
    member, generation = await _stable_member(coordinator)
    assert coordinator.heartbeat(HeartbeatRequest(GROUP, generation, member, None)) == HeartbeatResult(ErrorCode.none)
    assert coordinator.heartbeat(HeartbeatRequest(GROUP, generation + 1, member, None)).error \
        is ErrorCode.illegal_generation

    committed = coordinator.commit_offsets(OffsetCommitRequest(GROUP, generation, member, None, (
        OffsetCommit("orders", 1, 42, -1, "m"), OffsetCommit("orders", 0, 7, 3, None))))
    assert committed.partitions == (PartitionResult("orders", 1, ErrorCode.none),
                                    PartitionResult("orders", 0, ErrorCode.none))

    fetched = coordinator.fetch_offsets(OffsetFetchRequest(GROUP, (("orders", 0), ("orders", 5))))
    assert fetched.error is ErrorCode.none
    assert [(f.topic, f.partition) for f in fetched.partitions] == [("orders", 0), ("orders", 5)]
    first, missing = fetched.partitions
    assert first.committed is not None and (first.committed.offset, first.committed.leader_epoch) == (7, 3)
    assert missing == FetchedOffset("orders", 5, None)
    everything = coordinator.fetch_offsets(OffsetFetchRequest(GROUP, None))
    assert sorted((f.topic, f.partition) for f in everything.partitions) == [("orders", 0), ("orders", 1)]

    deleted = coordinator.delete_offsets(OffsetDeleteRequest(GROUP, (("orders", 1),)))
    assert deleted == OffsetDeleteResult(ErrorCode.none, (PartitionResult("orders", 1, ErrorCode.none),))
    assert coordinator.fetch_offsets(OffsetFetchRequest(GROUP, (("orders", 1),))).partitions[0].committed is None

    left = coordinator.leave(LeaveGroupRequest(GROUP, (MemberIdentity(member), MemberIdentity("stranger"))))
    assert left.error is ErrorCode.none
    assert left.members == (LeftMember(member, None, ErrorCode.none),
                            LeftMember("stranger", None, ErrorCode.unknown_member_id))


async def test_describe_list_and_delete_answer_per_group_in_order(coordinator: GroupCoordinator) -> None:
    await _stable_member(coordinator)
    described = coordinator.describe(DescribeGroupsRequest(("ghost", GROUP)))
    assert [(d.group_id, d.state) for d in described.groups] == [("ghost", "Dead"), (GROUP, "Stable")]

    assert [g.group_id for g in coordinator.list_groups(ListGroupsRequest()).groups] == [GROUP]
    assert [g.group_id for g in coordinator.list_groups(ListGroupsRequest(frozenset({"stable"}))).groups] == [GROUP]
    assert coordinator.list_groups(ListGroupsRequest(frozenset({"Empty"}))).groups == ()
    assert coordinator.list_groups(ListGroupsRequest(types_filter=frozenset({"consumer"}))).groups == ()

    result = coordinator.delete_groups(DeleteGroupsRequest((GROUP, "ghost")))
    assert result.groups == (DeletedGroup(GROUP, ErrorCode.non_empty_group),
                             DeletedGroup("ghost", ErrorCode.group_id_not_found))
    assert coordinator.delete_offsets(OffsetDeleteRequest("ghost", (("orders", 0),))) == \
        OffsetDeleteResult(ErrorCode.group_id_not_found, ())
