"""A topic on disk that cannot be opened at start is never hidden, re-created or re-described.

The reproduction of issue 12's data loss: a partition whose index file is replaced by a
directory used to make the broker serve without the topic, and the first produce re-created it
with one partition and a new topic id, hiding every acknowledged record of the others.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kafka_wire import WireClient, fetch, produce
from kio.schema.errors import ErrorCode

from pulllog.broker import Broker
from pulllog.broker.topics import StorageStartError, TopicManager
from pulllog.group.coordinator import OFFSETS_TOPIC
from pulllog.log.checkpoint import RECOVERY_POINT_CHECKPOINT_FILE, read_offsets
from pulllog.log import LogConfig
from pulllog.log.checkpoint import read_offsets
from pulllog.log.clean_shutdown import CLEAN_SHUTDOWN_MARKER
from pulllog.records import build_batch
from pulllog.records.batch import RecordBatch, iter_batches
from pulllog.testing import BrokerThread


def make_topic(data_dir: Path, name: str, partitions: int, records: int = 10) -> None:
    """A topic with ``records`` records in each partition, shut down cleanly."""
    topics = TopicManager(data_dir, LogConfig())
    topics.load()
    topic = topics.create(name, partitions)
    for p in topic.partitions.values():
        for i in range(records):
            p.log.append(build_batch([(None, b"%s-%d-%d" % (name.encode(), p.index, i))]))
    topics.close()


def break_partition(data_dir: Path, name: str, index: int) -> Path:
    """Replace the partition's time index by a directory (an OS error on open); return the
    saved file, for :func:`repair_partition`."""
    timeindex = next((data_dir / f"{name}-{index}").glob("*.timeindex"))
    saved = data_dir.parent / f"saved-{name}-{index}.timeindex"
    shutil.move(timeindex, saved)
    timeindex.mkdir()
    return saved


def repair_partition(data_dir: Path, name: str, index: int, saved: Path) -> None:
    (broken,) = (data_dir / f"{name}-{index}").glob("*.timeindex")
    broken.rmdir()
    shutil.move(saved, broken)


def stored_values(client: WireClient, topic: str, partition: int) -> list[bytes | None]:
    answer = fetch(client, topic, partition, 0)
    records = answer.responses[0].partitions[0].records or b""
    return [r.value for pos, _ in iter_batches(records) for r in RecordBatch.from_bytes(records, pos).records()]


async def test_a_partition_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 3)
    meta_before = (data / "topics" / "orders.json").read_bytes()
    break_partition(data, "orders", 1)
    with pytest.raises(StorageStartError) as refused:
        async with Broker(data_dir=data, port=0):
            pass
    message = str(refused.value)
    assert "orders-1" in message and "timeindex" in message and "Is a directory" in message
    assert "\n" not in message
    assert (data / "topics" / "orders.json").read_bytes() == meta_before
    # the partitions opened before the failure were closed cleanly, the lock released
    assert ("orders", 0) in read_offsets(data / CLEAN_SHUTDOWN_MARKER)
    with pytest.raises(StorageStartError):
        async with Broker(data_dir=data, port=0):
            pass


def test_a_degraded_start_takes_only_the_failing_partition_offline_and_never_recreates_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 3)
    make_topic(data, "healthy", 1)
    meta_before = (data / "topics" / "orders.json").read_bytes()
    topic_id = json.loads(meta_before)["topic_id"]
    saved = break_partition(data, "orders", 1)
    with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
        metadata = client.call("metadata", 12, {"topics": [{"name": "orders", "topic_id": None}],
                                                "allow_auto_topic_creation": True,
                                                "include_topic_authorized_operations": False})
        (entry,) = metadata.topics
        assert entry.error_code == ErrorCode.none and str(entry.topic_id) == topic_id
        # As Kafka takes partitions offline one by one: only orders-1 has no leader.
        assert [(p.partition_index, p.error_code, p.leader_id) for p in entry.partitions] == [
            (0, ErrorCode.none, 0), (1, ErrorCode.leader_not_available, -1), (2, ErrorCode.none, 0)]
        assert [p.offline_replicas for p in entry.partitions] == [(), (0,), ()]
        answer = produce(client, "orders", 1, build_batch([(None, b"x")]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.kafka_storage_error
        assert fetch(client, "orders", 1, 0).responses[0].partitions[0].error_code == ErrorCode.kafka_storage_error
        for index in (0, 2):  # the others are served, for reads and writes
            answer = produce(client, "orders", index, build_batch([(None, b"orders-%d-10" % index)]))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert stored_values(client, "orders", index) == [b"orders-%d-%d" % (index, i) for i in range(11)]
        created = client.call("create_topics", 7, {"topics": [{"name": "orders", "num_partitions": 1,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}],
                                                   "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.topic_already_exists
        healthy = fetch(client, "healthy", 0, 0)
        assert healthy.responses[0].partitions[0].high_watermark == 10
    assert (data / "topics" / "orders.json").read_bytes() == meta_before
    # The offline partition's recovery point is kept for the start that opens it.
    assert read_offsets(data / RECOVERY_POINT_CHECKPOINT_FILE)[("orders", 1)] == 10
    repair_partition(data, "orders", 1, saved)
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        assert broker.call(lambda: str(broker.broker.topics.get("orders").topic_id)) == topic_id
        for index in range(3):
            written = 10 if index == 1 else 11
            assert stored_values(client, "orders", index) == [b"orders-%d-%d" % (index, i) for i in range(written)]


def test_a_topic_with_an_offline_partition_can_grow_and_be_deleted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 2)
    break_partition(data, "orders", 0)
    with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
        assert _add_partitions(client, "orders", 3) == ErrorCode.none  # its topic file is readable
        answer = produce(client, "orders", 2, build_batch([(None, b"new")]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert _delete_topic(client, "orders") == ErrorCode.none
        assert _metadata_error(client, "orders") == ErrorCode.unknown_topic_or_partition
    assert not (data / "topics" / "orders.json").exists()
    assert sorted(p.name for p in data.glob("orders-*")) == []


def test_unreadable_topic_metadata_stops_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 2)
    (data / "topics" / "orders.json").write_text("{not json")
    with pytest.raises(StorageStartError, match=r"orders\.json"):
        BrokerThread(data).start()
    with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
        assert broker.call(lambda: broker.broker.topics.offline["orders"].partitions) == 2  # from the directories
        answer = produce(client, "orders", 0, build_batch([(None, b"x")]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.kafka_storage_error
    assert (data / "topics" / "orders.json").read_text() == "{not json"


def test_offline_consumer_offsets_is_never_recreated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, OFFSETS_TOPIC, 3, records=0)
    make_topic(data, "t", 1)
    meta_before = (data / "topics" / f"{OFFSETS_TOPIC}.json").read_bytes()
    break_partition(data, OFFSETS_TOPIC, 2)
    with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
        answer = client.call("offset_commit", 2, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_metadata": ""}]}]})
        assert answer.topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error
    assert (data / "topics" / f"{OFFSETS_TOPIC}.json").read_bytes() == meta_before


def _delete_topic(client: WireClient, name: str) -> int:
    answer = client.call("delete_topics", 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 10_000})
    return int(answer.responses[0].error_code)


def _add_partitions(client: WireClient, name: str, count: int) -> int:
    answer = client.call("create_partitions", 3, {"topics": [{"name": name, "count": count, "assignments": None}],
                                                  "timeout": 5000, "validate_only": False})
    return int(answer.results[0].error_code)


def _metadata_error(client: WireClient, name: str) -> int:
    answer = client.call("metadata", 12, {"topics": [{"name": name, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    return int(answer.topics[0].error_code)


def test_an_offline_topic_is_deleted_as_kafka_deletes_one_on_an_offline_log_dir(tmp_path: Path) -> None:
    """Kafka answers NONE and removes the files once it can (at the latest, the next start)."""
    data = tmp_path / "data"
    make_topic(data, "orders", 2)
    (data / "topics" / "orders.json").write_text("{not json")
    with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
        assert _add_partitions(client, "orders", 3) == ErrorCode.kafka_storage_error  # its file is not rewritten
        assert _delete_topic(client, "orders") == ErrorCode.none
        assert _metadata_error(client, "orders") == ErrorCode.unknown_topic_or_partition
        assert _delete_topic(client, "orders") == ErrorCode.unknown_topic_or_partition
    assert not (data / "topics" / "orders.json").exists()
    assert sorted(p.name for p in data.glob("orders-*")) == []
    assert list((data / "topics").glob("*.pending")) == []
    with BrokerThread(data) as broker, WireClient(broker.port) as client:  # a normal start: nothing offline
        assert _metadata_error(client, "orders") == ErrorCode.unknown_topic_or_partition


def test_an_offline_topics_directories_the_os_keeps_go_at_the_next_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 2)
    (data / "topics" / "orders.json").write_text("{not json")
    with monkeypatch.context() as patch:
        patch.setattr(shutil, "rmtree", lambda *args, **kwargs: None)  # the OS refuses to remove them now
        with BrokerThread(data, start_with_offline_partitions=True) as broker, WireClient(broker.port) as client:
            assert _delete_topic(client, "orders") == ErrorCode.none
            assert _metadata_error(client, "orders") == ErrorCode.unknown_topic_or_partition
    assert sorted(p.name for p in data.glob("orders-*")) == ["orders-0", "orders-1"]
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        assert _metadata_error(client, "orders") == ErrorCode.unknown_topic_or_partition
    assert sorted(p.name for p in data.glob("orders-*")) == []
    assert list((data / "topics").glob("*.pending")) == []
