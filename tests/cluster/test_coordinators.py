"""The group and transaction coordinators move with leadership (issue 16): in a three-broker
cluster ``__consumer_offsets`` and ``__transaction_state`` are replicated (RF 3), a group's or a
transactional id's coordinator is the leader of its partition, and when that broker is
SIGKILLed the new leader loads the partition's groups / transactional ids from its replica:
members find it and keep consuming with their committed offsets, and a transactional producer
finishes its open transaction and commits the next ones.

Every broker here runs with a 2 s ZooKeeper session, so a SIGKILLed one leaves quickly; the
internal topics get 3 partitions (Kafka's default 50 only makes the start slower)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until, wait_until
from zk_brokers import Cluster

from pulllog.net.coordinator_keys import partition_for

TOPIC, PARTITIONS = "events", 3
OVERRIDES = ("zookeeper.session.timeout.ms=2000", "offsets.topic.num.partitions=3",
             "transaction.state.log.num.partitions=3", "group.initial.rebalance.delay.ms=0")


def _bootstrap(cluster: Cluster, without: int | None = None) -> str:
    return ",".join(b.bootstrap_servers for i, b in cluster.brokers.items() if i != without)


def _start(cluster: Cluster) -> str:
    cluster.overrides = OVERRIDES
    cluster.start(3)
    bootstrap = _bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[TOPIC].result()
    return bootstrap


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[Any] = []
    for i, value in enumerate(values):
        # each partition explicitly: librdkafka's sticky partitioner may leave one partition
        # without records, and its committed offset would then be none (-1001)
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and failed == []


def _leader(zk_client: Any, cluster: Cluster, topic: str, partition: int) -> int:
    data, _stat = zk_client.get(cluster.path(f"/brokers/topics/{topic}/partitions/{partition}/state"))
    return int(json.loads(data)["leader"])


def _coordinator(zk_client: Any, cluster: Cluster, topic: str, key: str) -> tuple[int, int]:
    """(partition, its leader): the broker coordinating ``key``, once its topic exists."""
    partition = partition_for(key, 3)
    path = cluster.path(f"/brokers/topics/{topic}/partitions/{partition}/state")
    block_until(lambda: zk_client.exists(path) is not None, f"{topic} is created")
    return partition, _leader(zk_client, cluster, topic, partition)


def _kill_and_wait_for_new_leader(zk_client: Any, cluster: Cluster, broker_id: int, topic: str,
                                  partition: int) -> None:
    cluster.broker(broker_id).kill()
    block_until(lambda: _leader(zk_client, cluster, topic, partition) not in (broker_id, -1),
                f"{topic}-{partition} has a new leader")


def _read(consumer: Consumer, got: list[bytes], count: int) -> None:
    def read() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message.value())
        return len(set(got)) >= count
    block_until(read, f"{count} distinct records are consumed", interval_s=0)


def _commit(consumer: Consumer) -> None:
    """A synchronous commit, again while the group's coordinator is being found."""
    def commit() -> bool:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException:
            return False
        return True
    block_until(commit, "the commit succeeds")


def test_a_librdkafka_group_keeps_consuming_when_its_coordinators_broker_is_killed(
        own_cluster: Cluster, zk_client: Any) -> None:
    bootstrap = _start(own_cluster)
    first = [f"first-{i}".encode() for i in range(300)]
    _produce(bootstrap, first)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "movers", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    got: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        _read(consumer, got, len(first))
        _commit(consumer)
        partition, coordinator = _coordinator(zk_client, own_cluster, "__consumer_offsets", "movers")
        committed = {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)}
        assert sum(committed.values()) == len(first)
        _kill_and_wait_for_new_leader(zk_client, own_cluster, coordinator, "__consumer_offsets", partition)
        second = [f"second-{i}".encode() for i in range(300)]
        _produce(_bootstrap(own_cluster, without=coordinator), second)
        _read(consumer, got, len(first) + len(second))
        _commit(consumer)
    finally:
        consumer.close()
    assert set(got) == set(first) | set(second)  # nothing skipped (a redelivery would be allowed)
    survivors = _bootstrap(own_cluster, without=coordinator)
    fresh = Consumer({"bootstrap.servers": survivors, "group.id": "movers", "enable.auto.commit": False})
    try:
        after = fresh.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        fresh.close()
    assert sum(tp.offset for tp in after) == len(first) + len(second)
    assert all(tp.offset >= committed[tp.partition] for tp in after)


def test_pulllogs_consumer_keeps_consuming_when_its_coordinators_broker_is_killed(
        own_cluster: Cluster, zk_client: Any) -> None:
    from pulllog.client.consumer import Consumer as PulllogConsumer

    bootstrap = _start(own_cluster)
    first = [f"first-{i}".encode() for i in range(200)]
    _produce(bootstrap, first)

    async def run() -> tuple[set[bytes], int, int]:
        consumer = PulllogConsumer(bootstrap, group_id="pulllog-movers", enable_auto_commit=False,
                                   auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
        await consumer.start()
        got: set[bytes] = set()

        async def read(count: int) -> bool:
            batches = await consumer.getmany(timeout_ms=200)
            got.update(r.value for records in batches.values() for r in records)
            return len(got) >= count

        try:
            consumer.subscribe([TOPIC])
            await wait_until(lambda: read(len(first)), "the first records are consumed")
            await consumer.commit()
            partition, coordinator = await asyncio.to_thread(
                _coordinator, zk_client, own_cluster, "__consumer_offsets", "pulllog-movers")
            await asyncio.to_thread(_kill_and_wait_for_new_leader, zk_client, own_cluster, coordinator,
                                    "__consumer_offsets", partition)
            await asyncio.to_thread(_produce, _bootstrap(own_cluster, without=coordinator), second)
            await wait_until(lambda: read(len(first) + len(second)), "the second records are consumed")

            async def commit() -> bool:
                try:
                    await consumer.commit()
                except Exception:  # the coordinator is being found again
                    return False
                return True
            await wait_until(commit, "the commit succeeds")
            committed = 0
            for p in range(PARTITIONS):
                committed += await consumer.committed(_pulllog_tp(p)) or 0
        finally:
            await consumer.close()
        return got, committed, coordinator

    second = [f"second-{i}".encode() for i in range(200)]
    got, committed, _coordinator_id = asyncio.run(run())
    assert got == set(first) | set(second)
    assert committed == len(first) + len(second)


def _pulllog_tp(partition: int) -> Any:
    from pulllog.client.types import TopicPartition as PulllogTopicPartition

    return PulllogTopicPartition(TOPIC, partition)


def _read_committed(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    try:
        _read(consumer, got, count)
        # What is still to come would come now: the log ends are read up to their LSO.
        for _ in range(10):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_a_librdkafka_transactional_producer_goes_on_when_its_coordinators_broker_is_killed(
        own_cluster: Cluster, zk_client: Any) -> None:
    bootstrap = _start(own_cluster)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "mover",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    first = [f"first-{i}".encode() for i in range(100)]
    producer.begin_transaction()
    for value in first:
        producer.produce(TOPIC, value=value)
    producer.commit_transaction(30)
    partition, coordinator = _coordinator(zk_client, own_cluster, "__transaction_state", "mover")
    open_txn = [f"open-{i}".encode() for i in range(100)]
    producer.begin_transaction()
    for value in open_txn:
        producer.produce(TOPIC, value=value)
    assert producer.flush(30) == 0
    _kill_and_wait_for_new_leader(zk_client, own_cluster, coordinator, "__transaction_state", partition)
    try:
        producer.commit_transaction(60)
        open_committed = True
    except KafkaException as exc:
        assert exc.args[0].txn_requires_abort(), exc
        producer.abort_transaction(60)
        open_committed = False
    last = [f"last-{i}".encode() for i in range(100)]
    producer.begin_transaction()
    for value in last:
        producer.produce(TOPIC, value=value)
    producer.commit_transaction(60)
    expected = first + (open_txn if open_committed else []) + last
    got = _read_committed(_bootstrap(own_cluster, without=coordinator), len(expected))
    assert sorted(got) == sorted(expected)  # each committed record once, nothing aborted


def _wire(broker: Any) -> Any:
    from kafka_wire import WireClient

    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return WireClient(int(port), host=host)


def _find(broker: Any, key: str, key_type: int) -> Any:
    with _wire(broker) as client:
        return client.call("find_coordinator", 4, {"key_type": key_type, "coordinator_keys": [key]}).coordinators[0]


def test_every_broker_names_the_partition_leader_and_the_others_answer_not_coordinator(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = OVERRIDES
    own_cluster.start(3)
    brokers = list(own_cluster.brokers.values())
    for key, key_type, topic in (("a-group", 0, "__consumer_offsets"), ("a-txn", 1, "__transaction_state")):
        found = block_until(lambda: (c := _find(brokers[0], key, key_type)).error_code == 0 and c,  # noqa: B023
                            f"the coordinator of {key} is found")
        _partition, leader = _coordinator(zk_client, own_cluster, topic, key)
        assert found.node_id == leader
        assert {_find(b, key, key_type).node_id for b in brokers} == {leader}
    group_leader = _find(brokers[0], "a-group", 0).node_id
    txn_leader = _find(brokers[0], "a-txn", 1).node_id
    for broker in brokers:
        with _wire(broker) as client:
            heartbeat = client.call("heartbeat", 4, {"group_id": "a-group", "generation_id": 1,
                                                     "member_id": "m", "group_instance_id": None})
            fetched = client.call("offset_fetch", 7, {"group_id": "a-group", "topics": None,
                                                     "require_stable": False})
            init = client.call("init_producer_id", 4, {"transactional_id": "a-txn", "transaction_timeout": 60_000,
                                                     "producer_id": -1, "producer_epoch": -1})
        ours = broker.broker_id == group_leader
        assert heartbeat.error_code == (25 if ours else 16)  # UNKNOWN_MEMBER_ID / NOT_COORDINATOR
        assert fetched.error_code == (0 if ours else 16)
        assert init.error_code == (0 if broker.broker_id == txn_leader else 16)
    # created as Kafka creates them: compacted, and __transaction_state with
    # min.insync.replicas = transaction.state.log.min.isr (2 by default)
    configs = {topic: json.loads(zk_client.get(own_cluster.path(f"/config/topics/{topic}"))[0])["config"]
               for topic in ("__consumer_offsets", "__transaction_state")}
    assert configs["__consumer_offsets"]["cleanup.policy"] == "compact"
    assert "min.insync.replicas" not in configs["__consumer_offsets"]
    assert configs["__transaction_state"]["min.insync.replicas"] == "2"


def test_an_offset_commit_is_answered_once_the_isr_has_it(own_cluster: Cluster, zk_client: Any) -> None:
    """acks=all for the coordinator's own appends: with both followers of the group's
    ``__consumer_offsets`` partition paused (still in the ISR: their ZooKeeper sessions and
    replica.lag.time.max.ms outlast the pause), a commit waits for them and answers
    COORDINATOR_NOT_AVAILABLE after offsets.commit.timeout.ms (5 s), as Kafka's coordinator
    maps REQUEST_TIMED_OUT; once they run again the commit succeeds."""
    import os
    import signal

    own_cluster.overrides = ("offsets.topic.num.partitions=3",)
    own_cluster.start(3)
    bootstrap = _bootstrap(own_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)], operation_timeout=30)[TOPIC].result()
    first = next(iter(own_cluster.brokers.values()))
    block_until(lambda: _find(first, "solo", 0).error_code == 0, "the coordinator of 'solo' is found")
    coordinator = own_cluster.broker(_find(first, "solo", 0).node_id)
    partition = partition_for("solo", 3)
    state = own_cluster.path(f"/brokers/topics/__consumer_offsets/partitions/{partition}/state")
    block_until(lambda: len(json.loads(zk_client.get(state)[0])["isr"]) == 3, "every replica is in the ISR")

    def commit(offset: int) -> int:
        with _wire(coordinator) as client:
            answer = client.call("offset_commit", 8, {
                "group_id": "solo", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                           "committed_leader_epoch": -1,
                                                           "committed_metadata": ""}]}]})
        return int(answer.topics[0].partitions[0].error_code)

    assert commit(1) == 0
    followers = [b for b in own_cluster.brokers.values() if b is not coordinator]
    for follower in followers:
        assert follower.proc is not None
        os.kill(follower.proc.pid, signal.SIGSTOP)
    try:
        assert commit(2) == 15  # COORDINATOR_NOT_AVAILABLE
    finally:
        for follower in followers:
            assert follower.proc is not None
            os.kill(follower.proc.pid, signal.SIGCONT)
    assert block_until(lambda: commit(3) == 0, "a commit succeeds with the followers back")


def test_pulllogs_transactional_producer_goes_on_when_its_coordinators_broker_is_killed(
        own_cluster: Cluster, zk_client: Any) -> None:
    from pulllog.client.producer import Producer as PulllogProducer
    from pulllog.client.transactions import AbortableTransactionError

    bootstrap = _start(own_cluster)
    first = [f"first-{i}".encode() for i in range(100)]
    open_txn = [f"open-{i}".encode() for i in range(100)]
    last = [f"last-{i}".encode() for i in range(100)]

    async def run() -> tuple[bool, int]:
        producer = PulllogProducer(bootstrap, transactional_id="pulllog-mover")
        await producer.start()
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            for value in first:
                await producer.send(TOPIC, value)
            await producer.commit_transaction()
            partition, coordinator = await asyncio.to_thread(
                _coordinator, zk_client, own_cluster, "__transaction_state", "pulllog-mover")
            producer.begin_transaction()
            for value in open_txn:
                await producer.send(TOPIC, value)
            await producer.flush()
            await asyncio.to_thread(_kill_and_wait_for_new_leader, zk_client, own_cluster, coordinator,
                                    "__transaction_state", partition)
            try:
                await producer.commit_transaction()
                open_committed = True
            except AbortableTransactionError:
                await producer.abort_transaction()
                open_committed = False
            producer.begin_transaction()
            for value in last:
                await producer.send(TOPIC, value)
            await producer.commit_transaction()
        finally:
            await producer.close()
        return open_committed, coordinator

    open_committed, coordinator = asyncio.run(run())
    expected = first + (open_txn if open_committed else []) + last
    got = _read_committed(_bootstrap(own_cluster, without=coordinator), len(expected))
    assert sorted(got) == sorted(expected)  # each committed record once, nothing aborted
