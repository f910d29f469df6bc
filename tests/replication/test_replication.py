"""Replication's data path over three real brokers: followers, high watermark, ISR, acks=all,
leader epochs and truncation (the controller is the in-test stand-in of replica_cluster.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Producer as RdProducer
from kio.schema.errors import ErrorCode
from replica_cluster import HOSTS, TestController, raw_log
from waits import wait_until

from pulllog import Producer
from pulllog.client.connection import KafkaConnection
from pulllog.cluster.state import LeaderAndIsr
from pulllog.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from pulllog.records import build_batch

TOPIC = "orders"


def rd_produce(bootstrap: str, topic: str, count: int, acks: str = "all") -> list[Any]:
    """librdkafka's producer, blocking (run it in a thread): the delivery errors, if any."""
    errors: list[Any] = []
    producer = RdProducer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                           "enable.idempotence": acks == "all", "message.timeout.ms": 30_000})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i,
                         on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
        producer.poll(0)
    assert producer.flush(60) == 0
    return errors


async def connect(cluster: TestController, broker_id: int) -> KafkaConnection:
    return await KafkaConnection.connect(HOSTS[broker_id], cluster.brokers[broker_id].port)


async def produce_raw(conn: KafkaConnection, topic: str, records: list[bytes], *, acks: int = -1,
                      timeout_ms: int = 30_000) -> Any:
    batch = build_batch([(None, value) for value in records])
    response = await conn.request("produce", 9, {
        "transactional_id": None, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return response.responses[0].partition_responses[0]


async def fetch_raw(conn: KafkaConnection, topic: str, offset: int, *, epoch: int = -1) -> Any:
    response = await conn.request("fetch", 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": epoch, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    return response.responses[0].partitions[0]


async def list_latest(conn: KafkaConnection, topic: str, *, epoch: int = -1) -> Any:
    response = await conn.request("list_offsets", 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": epoch,
                                                    "timestamp": -1}]}]})
    return response.topics[0].partitions[0]


async def epoch_end(conn: KafkaConnection, topic: str, epoch: int, *, current: int = -1) -> Any:
    response = await conn.request("offset_for_leader_epoch", 4, {
        "replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
    return response.topics[0].partitions[0]


async def replicas_equal(cluster: TestController, topic: str, brokers: tuple[int, ...] = (1, 2, 3)) -> bool:
    logs = [cluster.log(b, topic) for b in brokers]
    ends = {log.log_end_offset for log in logs}
    hws = {log.high_watermark for log in logs}
    return len(ends) == 1 and hws == ends and len({raw_log(log) for log in logs}) == 1


async def test_librdkafka_acks_all_reaches_every_replica_byte_for_byte(cluster: TestController) -> None:
    cluster.create(TOPIC)
    errors = await asyncio.to_thread(rd_produce, cluster.brokers[1].bootstrap_servers, TOPIC, 200)
    assert errors == []
    leader = cluster.log(1, TOPIC)
    assert leader.high_watermark == leader.log_end_offset == 200  # acked: the whole ISR has it
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "the followers' logs equal the leader's")
    headers = leader.read_batches(0)
    assert headers and all(b.header.partition_leader_epoch == 0 for b in headers)


async def test_pulllog_producer_acks_all_reaches_every_replica(cluster: TestController) -> None:
    cluster.create(TOPIC)
    async with Producer(cluster.brokers[1].bootstrap_servers, acks="all") as producer:
        futures = [await producer.send(TOPIC, b"v%d" % i, key=b"k%d" % i) for i in range(50)]
        await producer.flush()
    assert [f.result().offset for f in futures] == list(range(50))
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "the followers' logs equal the leader's")


@pytest.mark.broker_properties({"replica.lag.time.max.ms": "1000"})
async def test_a_stopped_follower_holds_the_high_watermark_until_it_leaves_the_isr(cluster: TestController) -> None:
    cluster.create(TOPIC, configs={"min.insync.replicas": "2"})
    conn = await connect(cluster, 1)
    try:
        assert (await produce_raw(conn, TOPIC, [b"a", b"b"])).error_code == ErrorCode.none
        await wait_until(lambda: replicas_equal(cluster, TOPIC), "all three have the first records")
        await cluster.stop(3)
        written = await produce_raw(conn, TOPIC, [b"c"], acks=1)
        assert written.error_code == ErrorCode.none and written.base_offset == 2
        leader = cluster.log(1, TOPIC)
        await wait_until(lambda: cluster.log(2, TOPIC).log_end_offset == 3, "broker 2 fetched offset 2")
        # Broker 3 is still in the ISR: the high watermark stays, and consumers see only below it.
        assert cluster.states[(TOPIC, 0)].isr == (1, 2, 3)
        assert leader.high_watermark == 2 and (await list_latest(conn, TOPIC)).offset == 2
        fetched = await fetch_raw(conn, TOPIC, 0)
        assert fetched.high_watermark == 2
        assert [r.value for b in _batches(fetched.records) for r in b.records()] == [b"a", b"b"]
        # Past replica.lag.time.max.ms it is shrunk out; the HW moves, acks=all works with 2 of 3.
        await wait_until(lambda: cluster.states[(TOPIC, 0)].isr == (1, 2), "broker 3 left the ISR")
        await wait_until(lambda: leader.high_watermark == 3, "the high watermark moved on")
        assert (await produce_raw(conn, TOPIC, [b"d"])).error_code == ErrorCode.none
        # With 1 of 3 in sync (min.insync.replicas=2): refused before the append.
        await cluster.stop(2)
        await wait_until(lambda: cluster.states[(TOPIC, 0)].isr == (1,), "broker 2 left the ISR")
        end = leader.log_end_offset
        refused = await produce_raw(conn, TOPIC, [b"e"])
        assert refused.error_code == ErrorCode.not_enough_replicas
        assert leader.log_end_offset == end
        assert (await produce_raw(conn, TOPIC, [b"f"], acks=1)).error_code == ErrorCode.none
    finally:
        await conn.close()


@pytest.mark.broker_properties({"replica.lag.time.max.ms": "1000"})
async def test_an_isr_that_shrinks_under_a_waiting_produce_answers_after_append(cluster: TestController) -> None:
    cluster.create(TOPIC, configs={"min.insync.replicas": "3"})
    await cluster.stop(3)
    conn = await connect(cluster, 1)
    try:
        # Three in sync when it arrives: appended; then broker 3 is shrunk out, and the HW passes
        # the records with two: acknowledged by fewer than min.insync.replicas.
        answer = await produce_raw(conn, TOPIC, [b"x"])
        assert answer.error_code == ErrorCode.not_enough_replicas_after_append
        assert cluster.states[(TOPIC, 0)].isr == (1, 2)
        assert cluster.log(1, TOPIC).log_end_offset == 1
    finally:
        await conn.close()


@pytest.mark.broker_properties({"replica.lag.time.max.ms": "1000"})
async def test_a_returning_follower_catches_up_and_rejoins_the_isr(cluster: TestController) -> None:
    cluster.create(TOPIC)
    await cluster.stop(3)
    await wait_until(lambda: cluster.states[(TOPIC, 0)].isr == (1, 2), "broker 3 left the ISR")
    errors = await asyncio.to_thread(rd_produce, cluster.brokers[1].bootstrap_servers, TOPIC, 30)
    assert errors == []
    await cluster.start(3)
    await wait_until(lambda: set(cluster.states[(TOPIC, 0)].isr) == {1, 2, 3}, "broker 3 is back in the ISR")
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "broker 3's log equals the leader's")


async def test_acks_all_times_out_while_an_in_sync_follower_is_away(cluster: TestController) -> None:
    cluster.create(TOPIC)
    await cluster.stop(3)
    conn = await connect(cluster, 1)
    try:
        answer = await produce_raw(conn, TOPIC, [b"x"], timeout_ms=300)
        assert answer.error_code == ErrorCode.request_timed_out
        assert cluster.brokers[1].replicas.produce_purgatory.num_delayed == 0  # type: ignore[union-attr]
    finally:
        await conn.close()


async def test_a_decided_acks_all_answer_does_not_wait_behind_a_later_produce(cluster: TestController) -> None:
    """Answers keep their order, but one that is ready goes out at once: a pipelined Produce
    behind it that still waits for a follower does not hold it back (issue 16's p99)."""
    cluster.create("alone", replicas=(1,))  # the leader alone: acks=all is decided at the append
    cluster.create(TOPIC)
    await cluster.stop(3)  # still in TOPIC's ISR: an acks=all Produce waits for it
    conn = await connect(cluster, 1)
    purgatory = cluster.brokers[1].replicas.produce_purgatory  # type: ignore[union-attr]
    try:
        # Both in one write (the connection sends what one loop turn gives it together).
        first = asyncio.ensure_future(produce_raw(conn, "alone", [b"a"]))
        second = asyncio.ensure_future(produce_raw(conn, TOPIC, [b"b"], timeout_ms=20_000))
        assert (await first).error_code == ErrorCode.none
        assert not second.done() and purgatory.watched((TOPIC, 0)) == 1
        await cluster.start(3)
        assert (await second).error_code == ErrorCode.none
    finally:
        await conn.close()


async def test_a_follower_and_a_wrong_epoch_are_refused(cluster: TestController) -> None:
    cluster.create(TOPIC)
    cluster.elect((TOPIC, 0), 1)  # epoch 1
    follower, leader = await connect(cluster, 2), await connect(cluster, 1)
    try:
        assert (await produce_raw(follower, TOPIC, [b"x"])).error_code == ErrorCode.not_leader_or_follower
        assert (await fetch_raw(follower, TOPIC, 0)).error_code == ErrorCode.not_leader_or_follower
        assert (await list_latest(follower, TOPIC)).error_code == ErrorCode.not_leader_or_follower
        assert (await fetch_raw(leader, TOPIC, 0, epoch=0)).error_code == ErrorCode.fenced_leader_epoch
        assert (await fetch_raw(leader, TOPIC, 0, epoch=2)).error_code == ErrorCode.unknown_leader_epoch
        assert (await list_latest(leader, TOPIC, epoch=0)).error_code == ErrorCode.fenced_leader_epoch
        assert (await fetch_raw(leader, TOPIC, 0, epoch=1)).error_code == ErrorCode.none
    finally:
        await follower.close()
        await leader.close()


async def test_a_demoted_leader_truncates_its_divergent_tail(cluster: TestController) -> None:
    cluster.create(TOPIC)
    conn = await connect(cluster, 1)
    try:
        assert (await produce_raw(conn, TOPIC, [b"a", b"b", b"c"])).error_code == ErrorCode.none
        await wait_until(lambda: replicas_equal(cluster, TOPIC), "all three have offsets 0-2")
        # Brokers 2 and 3 go away; the old leader takes writes nobody else gets (acks=1).
        await cluster.stop(2)
        await cluster.stop(3)
        assert (await produce_raw(conn, TOPIC, [b"lost1", b"lost2"], acks=1)).error_code == ErrorCode.none
    finally:
        await conn.close()
    old_leader = cluster.log(1, TOPIC)
    assert old_leader.log_end_offset == 5
    # Broker 2 comes back as the leader of epoch 1 (broker 1 is left out of the ISR), takes a write.
    cluster.elect((TOPIC, 0), 2, isr=(2, 3))
    for broker_id in (2, 3):
        await cluster.start(broker_id)
    new_leader = cluster.log(2, TOPIC)
    assert new_leader.leader_epochs.entries == [(0, 0), (1, 3)]
    conn = await connect(cluster, 2)
    try:
        written = await produce_raw(conn, TOPIC, [b"new"])
        assert (written.error_code, written.base_offset) == (ErrorCode.none, 3)
        answer = await epoch_end(conn, TOPIC, 0)
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 3)
        answer = await epoch_end(conn, TOPIC, 1, current=1)
        assert (answer.leader_epoch, answer.end_offset) == (1, 4)
        assert (await epoch_end(conn, TOPIC, 0, current=0)).error_code == ErrorCode.fenced_leader_epoch
    finally:
        await conn.close()
    # The old leader, now a follower, cuts offsets 3-4 (epoch 0's tail past 3) and takes epoch 1's.
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "broker 1's log equals the new leader's")
    values = [r.value for b in old_leader.read_batches(0) for r in b.records()]
    assert values == [b"a", b"b", b"c", b"new"]
    assert old_leader.leader_epochs.entries == [(0, 0), (1, 3)]


async def test_delete_records_on_the_leader_moves_the_followers_log_start(cluster: TestController) -> None:
    cluster.create(TOPIC)
    errors = await asyncio.to_thread(rd_produce, cluster.brokers[1].bootstrap_servers, TOPIC, 20)
    assert errors == []
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "all three have every record")
    follower, leader = await connect(cluster, 2), await connect(cluster, 1)
    try:
        request = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 7}]}],
                   "timeout": 10_000}
        refused = await follower.request("delete_records", 2, request)
        assert refused.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        answer = await leader.request("delete_records", 2, request)
        assert (answer.topics[0].partitions[0].error_code, answer.topics[0].partitions[0].low_watermark) == (
            ErrorCode.none, 7)
    finally:
        await follower.close()
        await leader.close()
    await wait_until(lambda: all(cluster.log(b, TOPIC).log_start_offset == 7 for b in (2, 3)),
                     "the followers' log start offsets follow the leader's")


async def test_the_high_watermark_survives_a_restart(cluster: TestController) -> None:
    cluster.create(TOPIC)
    errors = await asyncio.to_thread(rd_produce, cluster.brokers[1].bootstrap_servers, TOPIC, 20)
    assert errors == []
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "all three have every record")
    await cluster.stop(2)
    path = cluster.root / "broker-2" / "replication-offset-checkpoint"
    assert path.read_text() == f"0\n1\n{TOPIC} 0 20\n"
    await cluster.start(2)
    assert cluster.log(2, TOPIC).high_watermark == 20


def _batches(records: bytes | None) -> list[Any]:
    from pulllog.records.batch import RecordBatch, iter_batches

    data = records or b""
    return [RecordBatch.from_bytes(data, pos) for pos, _h in iter_batches(data)]


async def test_a_new_leaders_epoch_checkpoint_is_written_off_the_loop_and_kept_over_a_restart(
        cluster: TestController) -> None:
    cluster.create(TOPIC, partitions=3)
    # A failover's views arrive together: broker 2 leads the three partitions in epoch 1 at
    # once (in memory), and one worker-thread write puts each epoch in its checkpoint file.
    for p in range(3):
        cluster.states[(TOPIC, p)] = replace(cluster.states[(TOPIC, p)], leader=2, leader_epoch=1, zk_version=1)
    for p in range(3):
        cluster.publish((TOPIC, p))
    paths = [cluster.log(2, TOPIC, p).directory / LEADER_EPOCH_CHECKPOINT_FILE for p in range(3)]
    assert all(cluster.log(2, TOPIC, p).leader_epochs.latest_epoch == 1 for p in range(3))
    await wait_until(lambda: all(LeaderEpochCache(path.parent).entries == [(1, 0)] for path in paths),
                     "broker 2's checkpoints hold epoch 1")
    await cluster.stop(2)
    await cluster.start(2)
    assert [cluster.log(2, TOPIC, p).leader_epochs.entries for p in range(3)] == [[(1, 0)]] * 3


async def test_a_replica_reassigned_away_is_refused_by_the_leader_and_deletes_its_copy(cluster: TestController) -> None:
    cluster.create(TOPIC)
    key = (TOPIC, 0)
    cluster.elect(key, 1)
    await asyncio.to_thread(rd_produce, f"{HOSTS[1]}:{cluster.brokers[1].port}", TOPIC, 50)
    await wait_until(lambda: replicas_equal(cluster, TOPIC), "the three replicas agree")
    directory = cluster.log(3, TOPIC).directory
    # The controller's end of a reassignment to (1, 2): the ISR without 3 and the assignment
    # without it, one write; the brokers' watches may bring the state first (leader epoch + 1,
    # the followers rebuilt from the old assignment), then the assignment.
    old = cluster.states[key]
    state = LeaderAndIsr(1, old.leader_epoch + 1, (1, 2), old.controller_epoch, old.zk_version + 1)
    cluster.states[key] = state
    cluster.publish(key, only=(1, 2))
    cluster.assignments[key] = (1, 2)
    cluster.publish(key)
    cluster.brokers[3].replicas.apply(cluster.view(key))  # type: ignore[union-attr]
    assert not directory.exists() and cluster.brokers[3].topics.hosted_log(TOPIC, 0) is None
    assert TOPIC not in cluster.brokers[3].topics.names()  # its only partition: the local topic went too
    # broker 3 fetching as a follower (as before it saw its removal) is refused, not taken back in sync
    leader = await connect(cluster, 1)
    try:
        response = await leader.request("fetch", 12, {
            "replica_id": 3, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": state.leader_epoch, "fetch_offset": 50,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    finally:
        await leader.close()
    assert response.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    assert cluster.states[key].isr == (1, 2)
