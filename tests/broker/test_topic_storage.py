"""Topics on disk: created whole or not at all, within the broker's partition limit, with
names up to Kafka's 249 characters; a storage failure answers an error code, never a closed
connection (issue 12, items 3 and 6).

Faults are real (a directory where a file must go) or the broker's fault hook
(``faults.fail_storage``: the handler meets the OSError a full disk raises).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka_wire import WireClient, produce

from pulllog.cli.main import main
from pulllog.log import Log, LogConfig
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

NONE, INVALID_REQUEST, KAFKA_STORAGE_ERROR, POLICY_VIOLATION = 0, 42, 56, 44
LONG = "t" * 240 + "-long-name"[: 249 - 240]  # 249 characters: Kafka's longest topic name
assert len(LONG) == 249


def create(c: WireClient, name: str, partitions: int) -> tuple[int, str | None]:
    answer = c.call("create_topics", 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                    "configs": []}], "timeout_ms": 10_000, "validate_only": False})
    [topic] = answer.topics
    return int(topic.error_code), topic.error_message


def add_partitions(c: WireClient, name: str, count: int) -> tuple[int, str | None]:
    answer = c.call("create_partitions", 3, {"topics": [{"name": name, "count": count, "assignments": None}],
                                             "timeout": 5000, "validate_only": False})
    [result] = answer.results
    return int(result.error_code), result.error_message


def delete(c: WireClient, name: str) -> tuple[int, str | None]:
    answer = c.call("delete_topics", 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 10_000})
    [result] = answer.responses
    return int(result.error_code), result.error_message


def partitions(c: WireClient, name: str) -> int | None:
    """The topic's partition count in Metadata, None when it is not listed."""
    meta = c.call("metadata", 12, {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
    [topic] = meta.topics
    return None if topic.error_code else len(topic.partitions)


def partition_dirs(data_dir: Path, name: str) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.rsplit("-", 1)[0] == name)


def block_topic_file(data_dir: Path, name: str) -> None:
    """A directory where the broker writes the topic file's temp file (under either name it
    has had): writing the topic file fails with IsADirectoryError, as with a full disk."""
    for tmp in (f"{name}.tmp", f"{name}.json.tmp"):
        (data_dir / "topics" / tmp / "in-the-way").mkdir(parents=True)


def unblock_topic_file(data_dir: Path, name: str) -> None:
    for tmp in (f"{name}.tmp", f"{name}.json.tmp"):
        shutil.rmtree(data_dir / "topics" / tmp)


def still_serves(broker: BrokerThread) -> None:
    assert broker.broker is not None and broker.broker.internal_errors == 0, "a handler failed with a traceback"


# ---------------------------------------------------------------------------- the partition limit


def test_creating_more_partitions_than_the_broker_serves_is_refused_up_front(tmp_path: Path) -> None:
    """`pulllog topic create x9 --partitions 100000`: one line, non-zero exit, nothing on disk."""
    with BrokerThread(tmp_path / "data") as broker:
        result = CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None}).invoke(
            main, ["topic", "create", "x9", "--partitions", "100000", "--bootstrap-server", broker.bootstrap_servers])

        assert result.exit_code == 1, (result.stdout, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: cannot create topic 'x9': ") and "max.broker.partitions is 20000" in line
        assert partition_dirs(broker.data_dir, "x9") == []
        with WireClient(broker.port) as c:
            assert partitions(c, "x9") is None


def test_create_and_create_partitions_past_max_broker_partitions_answer_policy_violation(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", properties={"max.broker.partitions": "4"}) as broker, \
            WireClient(broker.port) as c:
        assert create(c, "a", 3) == (NONE, None)

        code, message = create(c, "b", 2)
        assert code == POLICY_VIOLATION and "would make 5" in str(message)
        code, message = add_partitions(c, "a", 5)
        assert code == POLICY_VIOLATION and "max.broker.partitions is 4" in str(message)

        assert add_partitions(c, "a", 4) == (NONE, None)
        assert (partitions(c, "a"), partitions(c, "b")) == (4, None)
        assert partition_dirs(broker.data_dir, "b") == []


# ---------------------------------------------------------------------------- all or nothing


def test_a_create_that_fails_on_storage_leaves_nothing_and_answers_kafka_storage_error(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as broker:
        block_topic_file(broker.data_dir, "orders")
        with WireClient(broker.port) as c:
            code, message = create(c, "orders", 3)

            assert code == KAFKA_STORAGE_ERROR and "cannot create topic 'orders'" in str(message)
            assert partitions(c, "orders") is None  # the same connection still answers
        still_serves(broker)
        assert partition_dirs(broker.data_dir, "orders") == []
        assert not list((broker.data_dir / "topics").glob("*.pending"))

        unblock_topic_file(broker.data_dir, "orders")
        with WireClient(broker.port) as c:
            assert create(c, "orders", 3) == (NONE, None)
            assert partitions(c, "orders") == 3


def test_create_partitions_that_fails_on_storage_keeps_the_old_count_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert create(c, "orders", 2) == (NONE, None)
        block_topic_file(data, "orders")

        code, message = add_partitions(c, "orders", 5)

        assert code == KAFKA_STORAGE_ERROR and "cannot add partitions to 'orders'" in str(message)
        assert partitions(c, "orders") == 2
        assert partition_dirs(data, "orders") == ["orders-0", "orders-1"]
        still_serves(broker)
    with BrokerThread(data) as broker, WireClient(broker.port) as c:  # the obstacle still there
        assert partitions(c, "orders") == 2
        unblock_topic_file(data, "orders")
        assert add_partitions(c, "orders", 3) == (NONE, None)
        assert partitions(c, "orders") == 3


def test_a_delete_that_fails_on_storage_keeps_the_topic_whole(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as broker, WireClient(broker.port) as c:
        assert create(c, "orders", 2) == (NONE, None)
        topic_file = broker.data_dir / "topics" / "orders.json"
        saved = topic_file.read_text()
        topic_file.unlink()
        (topic_file / "in-the-way").mkdir(parents=True)  # cannot be unlinked: IsADirectoryError

        code, message = delete(c, "orders")

        assert code == KAFKA_STORAGE_ERROR and "cannot delete topic 'orders'" in str(message)
        assert partitions(c, "orders") == 2
        assert partition_dirs(broker.data_dir, "orders") == ["orders-0", "orders-1"]
        still_serves(broker)
        shutil.rmtree(topic_file)
        topic_file.write_text(saved)
        assert delete(c, "orders") == (NONE, None)
        assert partition_dirs(broker.data_dir, "orders") == []


def _leave_half_created(data: Path, name: str, topic_id: uuid.UUID, made: int, planned: int) -> None:
    """What a broker killed in the middle of creating ``name`` leaves: its pending file,
    ``made`` of ``planned`` partition directories, a temp file, no topic file."""
    (data / "topics").mkdir(parents=True, exist_ok=True)
    (data / "topics" / f"{topic_id.hex}-0.pending").write_text(json.dumps(
        {"topic": name, "topic_id": str(topic_id), "from": 0, "to": planned}))
    for index in range(made):
        Log.open(data / f"{name}-{index}", LogConfig()).close()
    (data / "topics" / f"{name}.tmp").write_text("{")


def test_a_start_after_a_crash_midway_through_a_create_removes_what_it_left(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert create(c, "kept", 2) == (NONE, None)
    _leave_half_created(data, "orders", uuid.uuid4(), made=2, planned=5)

    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert partitions(c, "orders") is None
        assert partitions(c, "kept") == 2
        assert partition_dirs(data, "orders") == []
        assert sorted(p.name for p in (data / "topics").iterdir()) == ["kept.json"]
        assert create(c, "orders", 5) == (NONE, None)


def test_a_start_after_a_crash_just_after_the_commit_keeps_the_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert create(c, "orders", 3) == (NONE, None)
    info = json.loads((data / "topics" / "orders.json").read_text())
    (data / "topics" / f"{uuid.UUID(info['topic_id']).hex}-0.pending").write_text(json.dumps(
        {"topic": "orders", "topic_id": info["topic_id"], "from": 0, "to": 3}))

    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert partitions(c, "orders") == 3
        assert partition_dirs(data, "orders") == ["orders-0", "orders-1", "orders-2"]
        assert not list((data / "topics").glob("*.pending"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs mounted at a fresh directory (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mnt)], check=True)


def test_on_a_full_disk_create_answers_kafka_storage_error_and_delete_frees_space(small_disk: Path) -> None:
    data = small_disk / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as c:
        assert create(c, "filler", 1) == (NONE, None)
        for i in range(200):  # 20 kB records into 2 MB: full long before the end
            answer = produce(c, "filler", 0, build_batch([(None, b"%06d" % i + b"x" * 20_000)]))
            if answer.responses[0].partition_responses[0].error_code == KAFKA_STORAGE_ERROR:
                break
        else:
            raise AssertionError("the 2 MB disk never filled up")
        # The last pages too: a new partition writes no data (empty files), its topic file does.
        st = os.statvfs(small_disk)
        (small_disk / "rest").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))

        code, message = create(c, "orders", 3)

        assert code == KAFKA_STORAGE_ERROR, message
        assert partitions(c, "orders") is None
        assert partition_dirs(data, "orders") == []
        assert delete(c, "filler") == (NONE, None)  # even with no room for a pending file
        assert create(c, "orders", 3) == (NONE, None)
        assert partitions(c, "orders") == 3
        still_serves(broker)


# ---------------------------------------------------------------------------- OSError in any handler


def test_an_os_error_in_a_handler_answers_kafka_storage_error_and_keeps_the_connection(
        pulllog_broker: BrokerThread) -> None:
    pulllog_broker.faults.fail_storage(22, errno.EMFILE)  # InitProducerId: a top-level error code
    pulllog_broker.faults.fail_storage(2, errno.EIO)  # ListOffsets: a code per partition
    with WireClient(pulllog_broker.port) as c:
        answer = c.call("init_producer_id", 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                "producer_id": -1, "producer_epoch": -1})
        assert int(answer.error_code) == KAFKA_STORAGE_ERROR
        answer = c.call("list_offsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "orders", "partitions": [{"partition_index": i, "current_leader_epoch": -1, "timestamp": -1}
                                              for i in (0, 1)]}]})
        assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [KAFKA_STORAGE_ERROR] * 2
        assert partitions(c, "absent") is None  # the connection still answers
    still_serves(pulllog_broker)


def test_read_only_apis_meeting_an_os_error_answer_kafka_storage_error_per_entry(
        pulllog_broker: BrokerThread) -> None:
    """Their answers have no top-level error code: each topic, group or resource carries it."""
    for api_key in (32, 15, 9, 3):  # DescribeConfigs, DescribeGroups, OffsetFetch, Metadata
        pulllog_broker.faults.fail_storage(api_key, errno.EIO)
    with WireClient(pulllog_broker.port) as c:
        answer = c.call("describe_configs", 4, {"resources": [
            {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
        assert [int(r.error_code) for r in answer.results] == [KAFKA_STORAGE_ERROR] * 2
        answer = c.call("describe_groups", 5, {"groups": ["g1", "g2"], "include_authorized_operations": False})
        assert [(g.group_id, int(g.error_code)) for g in answer.groups] == [("g1", KAFKA_STORAGE_ERROR),
                                                                             ("g2", KAFKA_STORAGE_ERROR)]
        answer = c.call("offset_fetch", 9, {"groups": [
            {"group_id": "g1", "member_id": None, "member_epoch": -1, "topics": None}], "require_stable": False})
        assert [(g.group_id, int(g.error_code)) for g in answer.groups] == [("g1", KAFKA_STORAGE_ERROR)]
        answer = c.call("metadata", 12, {"topics": [{"name": "orders", "topic_id": None}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        assert [(t.name, int(t.error_code)) for t in answer.topics] == [("orders", KAFKA_STORAGE_ERROR)]
        assert partitions(c, "absent") is None  # the connection still answers (the faults are spent)
    still_serves(pulllog_broker)


def test_produce_meeting_a_full_disk_answers_kafka_storage_error_per_partition(pulllog_broker: BrokerThread) -> None:
    with WireClient(pulllog_broker.port) as c:
        assert create(c, "orders", 2) == (NONE, None)
        pulllog_broker.faults.fail_storage(0, errno.ENOSPC, topic="orders")
        answer = produce(c, "orders", 1, build_batch([(None, b"v")]))
        [topic] = answer.responses
        assert [int(p.error_code) for p in topic.partition_responses] == [KAFKA_STORAGE_ERROR]
        assert partitions(c, "orders") == 2
    still_serves(pulllog_broker)


# ---------------------------------------------------------------------------- 249-character names


def run_cli(*args: str, stdin: bytes | None = None) -> tuple[int, bytes, str]:
    result = CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None}).invoke(main, list(args), input=stdin)
    return result.exit_code, result.stdout_bytes, result.stderr


def test_a_249_character_topic_name_works_end_to_end(tmp_path: Path) -> None:
    """Create, produce, consume (pulllog's client and kcat), restart, delete."""
    data = tmp_path / "data"
    with BrokerThread(data) as broker:
        bs = ["--bootstrap-server", broker.bootstrap_servers]
        code, _, err = run_cli("topic", "create", LONG, "--partitions", "2", *bs)
        assert code == 0, err
        code, _, err = run_cli("produce", LONG, "--partition", "0", *bs, stdin=b"one\ntwo\n")
        assert code == 0, err
        kcat = subprocess.run(["kcat", "-b", broker.bootstrap_servers, "-P", "-t", LONG, "-p", "1"],
                              input=b"three\n", capture_output=True, timeout=60)
        assert kcat.returncode == 0, kcat.stderr
    assert (data / "topics" / f"{LONG}.json").exists()

    with BrokerThread(data) as broker:
        bs = ["--bootstrap-server", broker.bootstrap_servers]
        code, out, err = run_cli("consume", LONG, *bs)
        assert code == 0, err
        assert sorted(out.split()) == [b"one", b"three", b"two"]
        kcat = subprocess.run(["kcat", "-b", broker.bootstrap_servers, "-C", "-t", LONG, "-e", "-q", "-f", "%p:%s\\n"],
                              capture_output=True, timeout=60)
        assert kcat.returncode == 0, kcat.stderr
        assert sorted(kcat.stdout.split()) == [b"0:one", b"0:two", b"1:three"]
        code, _, err = run_cli("topic", "delete", LONG, *bs)
        assert code == 0, err
        assert partition_dirs(data, LONG) == []
        assert not (data / "topics" / f"{LONG}.json").exists()
