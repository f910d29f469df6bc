"""Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments, KIP-455)
through ZooKeeper with ``pulllog serve`` processes: the move under an acks=all producer, the
leader moved off, a cancel, a controller failover in the middle, Kafka's error codes, and
kafka-python's admin client against it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode
from waits import block_until
from zk_brokers import Cluster

from pulllog.client.admin import Admin, NewTopic, PartitionReplicas
from pulllog.client.connection import KafkaConnection
from pulllog.client.errors import KafkaError
from pulllog.client.types import TopicPartition


def _bootstrap(cluster: Cluster, *, without: int = -1) -> str:
    return ",".join(b.bootstrap_servers for b in cluster.brokers.values()
                    if b.proc and b.proc.poll() is None and b.broker_id != without)


def _admin_call(cluster: Cluster, call: Any, *, without: int = -1) -> Any:
    """An Admin call through the live brokers (``without`` one that is paused: a connection to
    it would wait for its answer)."""
    async def run() -> Any:
        async with Admin(_bootstrap(cluster, without=without)) as admin:
            return await call(admin)

    return asyncio.run(run())


def _create(cluster: Cluster, topic: str, replicas: list[int]) -> None:
    _admin_call(cluster, lambda a: a.create_topics([NewTopic(topic, replica_assignment={0: replicas})]))


def _znode(zk_client: Any, cluster: Cluster, path: str) -> dict[str, Any]:
    return json.loads(zk_client.get(cluster.path(path))[0])


def _assignment(zk_client: Any, cluster: Cluster, topic: str) -> tuple[list[int], list[int], list[int]]:
    """Partition 0's (replicas, adding, removing) as the topic znode has them."""
    data = _znode(zk_client, cluster, f"/brokers/topics/{topic}")
    return (data["partitions"]["0"], data["adding_replicas"].get("0", []), data["removing_replicas"].get("0", []))


def _state(zk_client: Any, cluster: Cluster, topic: str) -> dict[str, Any]:
    return _znode(zk_client, cluster, f"/brokers/topics/{topic}/partitions/0/state")


def _reassign(cluster: Cluster, topic: str, replicas: list[int] | None, *, without: int = -1) -> KafkaError | None:
    result = _admin_call(cluster, lambda a: a.alter_partition_reassignments({TopicPartition(topic, 0): replicas}),
                         without=without)
    return result[TopicPartition(topic, 0)]


def _describe(cluster: Cluster, topic: str) -> PartitionReplicas:
    (found,) = _admin_call(cluster, lambda a: a.describe_replicas([topic]))
    return found


def _copy(cluster: Cluster, broker_id: int, topic: str) -> Path:
    return cluster.broker(broker_id).data_dir / f"{topic}-0"


def _segments(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


@contextmanager
def _paused(cluster: Cluster, broker_id: int) -> Iterator[None]:
    """SIGSTOP the broker (it stays registered: its session outlives the pause) and SIGCONT it after."""
    proc = cluster.broker(broker_id).proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


class _SteadyProducer:
    """An idempotent acks=all librdkafka producer writing numbered records until stopped; it
    keeps the values the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[bytes] = []
        self.errors: list[Any] = []
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self._producer.produce(self.topic, value=b"v%06d" % n, partition=0, on_delivery=self._delivered)
            n += 1
            self._producer.poll(0.002)

    def __enter__(self) -> _SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self._producer.flush(60) == 0


def _read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False})
    consumer.assign([KTopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        def more() -> bool:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    values.append(msg.value())
            return len(values) >= count

        block_until(more, f"{count} records read back")
    finally:
        consumer.close()
    return values


def test_a_partition_moves_from_1_2_to_2_3_under_an_acks_all_producer(cluster: Cluster, zk_client: Any) -> None:
    _create(cluster, "moving", [2, 1])
    block_until(lambda: _state(zk_client, cluster, "moving")["isr"] == [2, 1], "the partition is led by 2, 1 in sync")
    epoch = _state(zk_client, cluster, "moving")["leader_epoch"]
    with _SteadyProducer(_bootstrap(cluster), "moving") as producer:
        block_until(lambda: len(producer.acked) >= 200, "the producer is under way")
        assert _reassign(cluster, "moving", [2, 3]) is None
        block_until(lambda: _assignment(zk_client, cluster, "moving") == ([2, 3], [], []),
                    "the reassignment finished: replicas [2, 3], nothing adding or removing")
        block_until(lambda: len(producer.acked) >= 400, "the producer goes on after the move")
    assert producer.errors == []
    state = _state(zk_client, cluster, "moving")
    assert state["leader"] == 2 and sorted(state["isr"]) == [2, 3] and state["leader_epoch"] > epoch
    block_until(lambda: not _copy(cluster, 1, "moving").exists(), "broker 1 deleted its copy")
    described = _describe(cluster, "moving")
    assert described.replicas == (2, 3) and described.leader == 2
    # every acknowledged record is readable, and the new replicas hold the same batches
    assert set(producer.acked) <= set(_read_all(_bootstrap(cluster), "moving", len(producer.acked)))
    block_until(lambda: _segments(_copy(cluster, 2, "moving")) == _segments(_copy(cluster, 3, "moving")),
                "brokers 2 and 3 hold identical segments")
    # the topic's local copy on broker 1 is gone too (it held no other partition of it)
    assert not (cluster.broker(1).data_dir / "topics" / "moving.json").exists()


def test_moving_the_leader_off_elects_a_target_replica_and_clients_follow(cluster: Cluster, zk_client: Any) -> None:
    _create(cluster, "leaderless", [1, 2])
    block_until(lambda: _state(zk_client, cluster, "leaderless")["isr"] == [1, 2], "led by 1 with 2 in sync")
    with _SteadyProducer(_bootstrap(cluster), "leaderless") as producer:
        block_until(lambda: len(producer.acked) >= 100, "the producer is under way")
        assert _reassign(cluster, "leaderless", [3, 2]) is None
        block_until(lambda: _assignment(zk_client, cluster, "leaderless") == ([3, 2], [], []), "moved to [3, 2]")
        acked_at_move = len(producer.acked)
        block_until(lambda: len(producer.acked) >= acked_at_move + 100, "the producer follows the new leader")
    assert producer.errors == []
    assert _state(zk_client, cluster, "leaderless")["leader"] == 3  # the target's first in-sync replica
    block_until(lambda: not _copy(cluster, 1, "leaderless").exists(), "broker 1, the old leader, deleted its copy")
    assert set(producer.acked) <= set(_read_all(_bootstrap(cluster), "leaderless", len(producer.acked)))


@contextmanager
def _unreachable_broker(zk_client: Any, cluster: Cluster, broker_id: int) -> Iterator[None]:
    """A broker registered in ZooKeeper that never fetches (its port refuses connections): a
    reassignment that adds it stays under way until it is cancelled."""
    from pulllog.cluster.znodes import BrokerRegistration

    path = cluster.path(f"/brokers/ids/{broker_id}")
    zk_client.create(path, BrokerRegistration(broker_id, "127.0.0.1", 1).encode(), ephemeral=True)
    try:
        yield
    finally:
        zk_client.delete(path)


def test_a_cancel_puts_the_partition_back_and_the_added_replica_drops_its_copy(cluster: Cluster,
                                                                                zk_client: Any) -> None:
    from kafka import TopicPartition as PyTopicPartition
    from kafka.admin import KafkaAdminClient

    _create(cluster, "cancelled", [1, 2])
    block_until(lambda: _state(zk_client, cluster, "cancelled")["isr"] == [1, 2], "led by 1 with 2 in sync")
    admin = KafkaAdminClient(bootstrap_servers=_bootstrap(cluster))
    try:
        with _unreachable_broker(zk_client, cluster, 4):  # the move to [1, 3, 4] cannot finish
            assert admin.alter_partition_reassignments({PyTopicPartition("cancelled", 0): [1, 3, 4]}) == {
                PyTopicPartition("cancelled", 0): None}
            assert _assignment(zk_client, cluster, "cancelled") == ([1, 3, 4, 2], [3, 4], [2])
            # broker 3 copies the partition and joins the ISR; the move still waits for 4
            block_until(lambda: sorted(_state(zk_client, cluster, "cancelled")["isr"]) == [1, 2, 3],
                        "broker 3 caught up")
            assert _copy(cluster, 3, "cancelled").exists()
            # kafka-python lists it as Kafka would: the full replica set, adding and removing
            listed = admin.list_partition_reassignments()
            assert listed == {PyTopicPartition("cancelled", 0): {
                "replicas": [1, 3, 4, 2], "adding_replicas": [3, 4], "removing_replicas": [2]}}
            assert _reassign(cluster, "cancelled", None) is None
            assert _assignment(zk_client, cluster, "cancelled") == ([1, 2], [], [])
        assert admin.list_partition_reassignments() == {}
        error = _reassign(cluster, "cancelled", None)
        assert error is not None and error.code == ErrorCode.no_reassignment_in_progress
    finally:
        admin.close()
    # the cancel took broker 3 out of the ISR with the assignment, in one write
    state = _state(zk_client, cluster, "cancelled")
    assert state["leader"] == 1 and state["isr"] == [1, 2]
    block_until(lambda: not _copy(cluster, 3, "cancelled").exists()
                and not (cluster.broker(3).data_dir / "topics" / "cancelled.json").exists(),
                "broker 3 deleted its copy of the cancelled move")


def test_bad_reassignments_get_kafkas_error_codes(cluster: Cluster) -> None:
    _create(cluster, "refused", [1, 2])

    def code(topic: str, partition: int, replicas: list[int] | None) -> ErrorCode:
        result = _admin_call(cluster, lambda a: a.alter_partition_reassignments(
            {TopicPartition(topic, partition): replicas}))[TopicPartition(topic, partition)]
        return ErrorCode.none if result is None else result.code

    assert code("no-such-topic", 0, [1, 2]) == ErrorCode.unknown_topic_or_partition
    assert code("refused", 7, [1, 2]) == ErrorCode.unknown_topic_or_partition
    assert code("refused", 0, []) == ErrorCode.invalid_replica_assignment
    assert code("refused", 0, [2, 2]) == ErrorCode.invalid_replica_assignment
    assert code("refused", 0, [1, -1]) == ErrorCode.invalid_replica_assignment
    assert code("refused", 0, [1, 9]) == ErrorCode.invalid_replica_assignment  # broker 9 is not alive
    assert code("refused", 0, None) == ErrorCode.no_reassignment_in_progress

    async def ask_a_non_controller() -> tuple[int, int]:
        async with Admin(_bootstrap(cluster)) as admin:
            controller = (await admin.describe_cluster()).controller_id
        other = next(b for b in cluster.brokers.values() if b.broker_id != controller)
        host, port = other.bootstrap_servers.rsplit(":", 1)
        conn = await KafkaConnection.connect(host, int(port))
        try:
            altered = await conn.request("alter_partition_reassignments", 0, {"timeout": 30_000, "topics": [
                {"name": "refused", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]}]})
            listed = await conn.request("list_partition_reassignments", 0, {"timeout": 30_000, "topics": None})
        finally:
            await conn.close()
        return int(altered.error_code), int(listed.error_code)

    assert asyncio.run(ask_a_non_controller()) == (ErrorCode.not_controller, ErrorCode.not_controller)


def test_a_new_controller_finishes_a_reassignment_its_predecessor_started(own_cluster: Cluster,
                                                                          zk_client: Any) -> None:
    own_cluster.start(3)
    controller = _znode(zk_client, own_cluster, "/controller")["brokerid"]
    assert controller == 1  # the first broker started
    _create(own_cluster, "handed-over", [1, 2])
    block_until(lambda: _state(zk_client, own_cluster, "handed-over")["isr"] == [1, 2], "led by 1 with 2 in sync")
    with _SteadyProducer(_bootstrap(own_cluster), "handed-over") as producer:
        block_until(lambda: len(producer.acked) >= 100, "the producer is under way")
    with _paused(own_cluster, 3):
        assert _reassign(own_cluster, "handed-over", [2, 3], without=3) is None
        assert _assignment(zk_client, own_cluster, "handed-over") == ([2, 3, 1], [3], [1])
        own_cluster.broker(1).stop()  # the controller leaves (cleanly: its session ends at once)
        block_until(lambda: zk_client.exists(own_cluster.path("/controller")) is not None
                    and _znode(zk_client, own_cluster, "/controller")["brokerid"] == 2, "broker 2 is the controller")
    block_until(lambda: _assignment(zk_client, own_cluster, "handed-over") == ([2, 3], [], []),
                "the new controller finished the reassignment")
    assert sorted(_state(zk_client, own_cluster, "handed-over")["isr"]) == [2, 3]
    assert set(producer.acked) <= set(_read_all(_bootstrap(own_cluster), "handed-over", len(producer.acked)))
    # broker 1 was down when the move finished: it deletes its copy once it is back
    assert _copy(own_cluster, 1, "handed-over").exists()
    own_cluster.broker(1).start()
    block_until(lambda: not _copy(own_cluster, 1, "handed-over").exists(), "broker 1 deleted its stale copy")



def test_the_cli_moves_a_partition_and_lists_nothing_once_it_is_done(cluster: Cluster, zk_client: Any,
                                                                      tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pulllog.cli.main import main

    def pulllog(*args: str) -> Any:
        runner = CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None, "COLUMNS": None})
        return runner.invoke(main, [*args, "--bootstrap-server", _bootstrap(cluster)])

    _create(cluster, "by-cli", [1, 2])
    block_until(lambda: _state(zk_client, cluster, "by-cli")["isr"] == [1, 2], "led by 1 with 2 in sync")
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"version": 1, "partitions": [{"topic": "by-cli", "partition": 0,
                                                               "replicas": [3, 1]}]}))
    result = pulllog("topic", "reassign", "--reassignment-json-file", str(moves))
    assert (result.exit_code, result.stdout) == (0, "Successfully started partition reassignment for by-cli-0\n")
    block_until(lambda: _assignment(zk_client, cluster, "by-cli") == ([3, 1], [], []), "moved to [3, 1]")
    listed = pulllog("topic", "reassignments", "by-cli")
    assert (listed.exit_code, listed.stdout) == (0, "no partition reassignment is in progress\n")
    described = json.loads(pulllog("topic", "describe", "by-cli", "--json").stdout)
    assert described["partitions"][0]["replicas"] == [3, 1]
    refused = pulllog("topic", "reassign", "by-cli", "--partition", "0", "--replicas", "3,3")
    assert refused.exit_code == 1 and refused.stderr.startswith("error: by-cli-0: INVALID_REPLICA_ASSIGNMENT: ")
