"""A cluster member's copy of a replicated topic holds only the partitions it is a replica of
(TopicManager.host_partition): no directory for the others, which answer NOT_LEADER_OR_FOLLOWER,
and the same after a restart (issue 16)."""

from __future__ import annotations

import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from pulllog.broker.topics import PartitionError, TopicManager
from pulllog.log import Log, LogConfig
from pulllog.records import build_batch


def _dirs(data_dir: Path, topic: str) -> list[str]:
    return sorted(d.name for d in data_dir.iterdir() if d.is_dir() and d.name.startswith(f"{topic}-"))


def _code(found: Log | PartitionError) -> ErrorCode:
    return found.code if isinstance(found, PartitionError) else ErrorCode.none


def test_a_copy_holds_only_its_partitions_and_keeps_them_across_a_restart(tmp_path: Path) -> None:
    topics = TopicManager(tmp_path, LogConfig(), node_id=2)
    topics.load()
    topic_id = uuid.uuid4()
    found = topics.host_partition("orders", 2, {"retention.ms": "60000"}, topic_id=topic_id)
    assert isinstance(found, Log)
    found.append(build_batch([(None, b"x")]))
    assert _dirs(tmp_path, "orders") == ["orders-2"]
    assert _code(topics.partition_log("orders", 0)) == ErrorCode.not_leader_or_follower
    assert topics.partition_logs("orders") is None  # never taken for the whole topic
    assert topics.partition_count() == 1  # max.broker.partitions counts what is held
    assert isinstance(topics.host_partition("orders", 0, topic_id=topic_id), Log)
    assert _dirs(tmp_path, "orders") == ["orders-0", "orders-2"]
    topics.close()

    again = TopicManager(tmp_path, LogConfig(), node_id=2)
    again.load()
    topic = again.get("orders")
    assert sorted(topic.partitions) == [0, 2] and topic.hosted_only and topic.topic_id == topic_id
    assert topic.overrides == {"retention.ms": "60000"}
    assert _code(again.partition_log("orders", 1)) == ErrorCode.not_leader_or_follower
    assert _code(again.partition_log("orders", -1)) == ErrorCode.unknown_topic_or_partition
    assert again.hosted_log("orders", 2) is not None and again.hosted_log("orders", 2).log_end_offset == 1
    assert _dirs(tmp_path, "orders") == ["orders-0", "orders-2"]  # the start made none for 1
    again.delete("orders")
    assert _dirs(tmp_path, "orders") == [] and not list((tmp_path / "topics").glob("*.pending"))
    again.close()


def test_a_single_brokers_topic_still_holds_every_partition(tmp_path: Path) -> None:
    topics = TopicManager(tmp_path, LogConfig())
    topics.load()
    topics.create("plain", 3)
    topics.add_partitions("plain", 4)
    assert _dirs(tmp_path, "plain") == [f"plain-{i}" for i in range(4)]
    assert _code(topics.partition_log("plain", 4)) == ErrorCode.unknown_topic_or_partition
    assert topics.partition_logs("plain") is not None and len(topics.partition_logs("plain")) == 4
    topics.close()


def test_a_copy_an_older_pulllog_made_grows_without_a_gap(tmp_path: Path) -> None:
    topics = TopicManager(tmp_path, LogConfig(), node_id=2)
    topics.load()
    topic_id = uuid.uuid4()
    topics.create("old", 2, topic_id=topic_id)  # as an older cluster member made its copy: no "hosted"
    assert isinstance(topics.host_partition("old", 3, topic_id=topic_id), Log)
    assert _dirs(tmp_path, "old") == [f"old-{i}" for i in range(4)]
    topics.close()
