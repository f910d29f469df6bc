"""Idempotent produce on the wire: retries are stored once, gaps and stale epochs refused,
and a restart between a write and its retry changes nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import confluent_kafka
import pytest

from pulllog.log.clean_shutdown import CLEAN_SHUTDOWN_MARKER
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

from kafka_wire import WireClient, fetch, produce
from log_contents import all_values

NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_RECORD = 0, 45, 47, 87
PRODUCE = 0  # the API key


def init_producer_id(client: WireClient, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    resp = client.call("init_producer_id", 4, {"transactional_id": None, "transaction_timeout": 60000,
                                               "producer_id": producer_id, "producer_epoch": epoch})
    assert resp.error_code.value == 0
    return int(resp.producer_id), int(resp.producer_epoch)


def send(client: WireClient, topic: str, pid: int, epoch: int, seq: int, values: list[bytes]) -> tuple[int, int]:
    data = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    part = produce(client, topic, 0, data, acks=-1).responses[0].partition_responses[0]
    return part.error_code.value, int(part.base_offset)


def stored_values(client: WireClient, topic: str) -> list[bytes]:
    from pulllog.records.batch import RecordBatch, iter_batches

    records = fetch(client, topic, 0, 0).responses[0].partitions[0].records or b""
    return [r.value for _pos, h in iter_batches(records) for r in RecordBatch.from_bytes(records, _pos).records()]


@pytest.fixture
def broker(tmp_path: Path):
    with BrokerThread(tmp_path / "data") as b:
        yield b


def test_resending_a_batch_returns_the_same_offset_and_stores_one_copy(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        pid, epoch = init_producer_id(c)
        assert send(c, "idem", pid, epoch, 0, [b"a", b"b"]) == (NONE, 0)
        assert send(c, "idem", pid, epoch, 2, [b"c"]) == (NONE, 2)
        assert send(c, "idem", pid, epoch, 0, [b"a", b"b"]) == (NONE, 0)  # the lost-response retry
        assert send(c, "idem", pid, epoch, 2, [b"c"]) == (NONE, 2)
        assert stored_values(c, "idem") == [b"a", b"b", b"c"]


def test_a_sequence_gap_is_out_of_order(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        pid, epoch = init_producer_id(c)
        assert send(c, "gap", pid, epoch, 0, [b"a"])[0] == NONE
        assert send(c, "gap", pid, epoch, 2, [b"c"])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(c, "gap", pid, epoch, 1, [b"b"]) == (NONE, 1)
        assert stored_values(c, "gap") == [b"a", b"b"]


def test_a_stale_epoch_is_refused_after_a_bump(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        pid, epoch = init_producer_id(c)
        assert send(c, "fence", pid, epoch, 0, [b"old"])[0] == NONE
        same_pid, new_epoch = init_producer_id(c, pid, epoch)  # KIP-360 bump
        assert (same_pid, new_epoch) == (pid, epoch + 1)
        assert send(c, "fence", pid, new_epoch, 3, [b"x"])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(c, "fence", pid, new_epoch, 0, [b"new"])[0] == NONE
        assert send(c, "fence", pid, epoch, 1, [b"zombie"])[0] == INVALID_PRODUCER_EPOCH
        assert stored_values(c, "fence") == [b"old", b"new"]


def test_a_retry_after_a_broker_restart_is_still_deduplicated(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as b, WireClient(b.port) as c:
        pid, epoch = init_producer_id(c)
        for seq in range(3):
            assert send(c, "restart", pid, epoch, seq, [b"v%d" % seq])[0] == NONE
    with BrokerThread(tmp_path / "data") as b, WireClient(b.port) as c:
        assert send(c, "restart", pid, epoch, 2, [b"v2"]) == (NONE, 2)
        assert send(c, "restart", pid, epoch, 4, [b"v4"])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(c, "restart", pid, epoch, 3, [b"v3"]) == (NONE, 3)
        assert stored_values(c, "restart") == [b"v0", b"v1", b"v2", b"v3"]


def test_a_retry_after_a_broker_crash_is_still_deduplicated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data) as b, WireClient(b.port) as c:
        pid, epoch = init_producer_id(c)
        for seq in range(3):
            assert send(c, "crash", pid, epoch, seq, [b"v%d" % seq])[0] == NONE
    # As if the process had died: no clean-shutdown marker, no snapshot from the close.
    (data / CLEAN_SHUTDOWN_MARKER).unlink()
    for partition in data.glob("crash-*"):
        for snapshot in partition.glob("*.snapshot"):
            snapshot.unlink()
    with BrokerThread(data) as b, WireClient(b.port) as c:
        assert send(c, "crash", pid, epoch, 1, [b"v1"]) == (NONE, 1)
        assert stored_values(c, "crash") == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(("pid", "epoch", "seq", "code"), [
    (7, 0, -1, INVALID_RECORD),
    (7, -1, 0, INVALID_RECORD),
    (7, -32768, -(2**31), INVALID_RECORD),
    (2**63 - 1, 2**15 - 1, 2**31 - 1, NONE),
    (0, 0, 2**31 - 1, NONE),
])
def test_hostile_producer_fields_get_an_error_code_or_are_stored(broker: BrokerThread, pid: int, epoch: int,
                                                                 seq: int, code: int) -> None:
    with WireClient(broker.port) as c:
        assert send(c, "hostile", pid, epoch, seq, [b"x", b"y"])[0] == code
    assert broker.broker.internal_errors == 0


def test_init_producer_id_at_the_epoch_limit_gets_a_new_id(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        pid, _ = init_producer_id(c)
        new_pid, epoch = init_producer_id(c, pid, 2**15 - 1)
        assert new_pid != pid and epoch == 0
    assert broker.broker.internal_errors == 0


def test_idle_producer_ids_expire(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", properties={"producer.id.expiration.ms": "1"}) as b, \
            WireClient(b.port) as c:
        pid, epoch = init_producer_id(c)
        assert send(c, "expire", pid, epoch, 0, [b"a"])[0] == NONE
        # The expiry check as it would run a second later: past producer.id.expiration.ms.
        assert b.call(b.broker.expire_producer_ids, time.time_ns() // 1_000_000 + 1_000) == 1
        # Forgotten: a retry is no longer recognised, any sequence is accepted (KIP-360).
        assert send(c, "expire", pid, epoch, 0, [b"a"]) == (NONE, 1)


def produce_with_librdkafka(bootstrap: str, topic: str, values: list[bytes]) -> None:
    errors: list[str] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 300,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100, "message.timeout.ms": 60_000})
    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda err, _msg: err is not None and errors.append(str(err)))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []


def produce_with_kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> None:
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=2,
                                   batch_size=4096, reconnect_backoff_ms=20, request_timeout_ms=30_000)
    try:
        futures = [producer.send(topic, value, partition=0) for value in values]
        producer.flush(60)
        assert all(f.get(10) is not None for f in futures)
    finally:
        producer.close(10)


def produce_with_aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> None:
    import aiokafka

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=2,
                                             max_batch_size=4096, retry_backoff_ms=20, request_timeout_ms=30_000)
        await producer.start()
        try:
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush()
            for future in futures:
                await future
        finally:
            await producer.stop()

    asyncio.run(run())


def produce_with_pulllog(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from pulllog import Producer

    async def run() -> None:
        async with Producer(bootstrap, enable_idempotence=True, linger_ms=2, batch_size=4096,
                            retry_backoff_ms=20) as producer:
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush()
            for future in futures:
                await future

    asyncio.run(run())


@pytest.mark.parametrize("client", [produce_with_librdkafka, produce_with_kafka_python, produce_with_aiokafka,
                                    produce_with_pulllog],
                         ids=["librdkafka", "kafka-python", "aiokafka", "pulllog"])
def test_retries_of_answers_lost_in_transit_are_stored_once(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    with BrokerThread(tmp_path / "data") as broker:
        assert broker.broker is not None
        # Every 7th Produce is appended, then its answer is lost with the connection (six
        # times): the client must retry a batch the log already holds.
        lost = broker.broker.faults.drop_connection(PRODUCE, topic="lossy", after_handling=True, every=7, times=6)
        sent = [b"%06d" % i for i in range(20_000)]
        client(broker.bootstrap_servers, "lossy", sent)
        assert lost.fired == 6, "the test must have lost answers"
        log = broker.call(lambda: broker.broker.topics.partition("lossy", 0).log)
        stored = broker.call(lambda: all_values(log))
        assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} message(s) stored twice"
        assert stored == sent


