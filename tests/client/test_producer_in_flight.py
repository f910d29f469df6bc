"""Several batches of one partition in flight: the Producer keeps send order and, with
idempotence, stores every record once, while a proxy loses requests or their answers.

Each test sends numbered values through a ``LossyProxy`` with ``batch_size=1``, so every
message set of ``send_batch()`` is its own batch and its own request, and checks the
partition's log on the broker itself. ``max_outstanding`` shows the producer really had
several requests of the partition in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest

from pulllog import Producer
from pulllog.testing import BrokerThread

from log_contents import all_values
from lossy_proxy import LossyProxy
from waits import wait_until

SETS, PER_SET = 400, 5


def _sets() -> list[list[bytes]]:
    return [[b"%06d" % (s * PER_SET + i) for i in range(PER_SET)] for s in range(SETS)]


def _stored(broker: BrokerThread, topic: str) -> list[bytes | None]:
    return broker.call(lambda: all_values(broker.broker.topics.partition(topic, 0).log))


async def _produce(bootstrap: str, topic: str, sets: list[list[bytes]], **options: object) -> list[int]:
    """Send every set, wait for all outcomes; return the base offsets (all must succeed)."""
    async with Producer(bootstrap, batch_size=1, retry_backoff_ms=10, **options) as producer:  # type: ignore[arg-type]
        futures = [await producer.send_batch(topic, values, partition=0) for values in sets]
        results = await asyncio.gather(*futures)
    return [r.base_offset for r in results]


def _run(tmp_path: Path, proxy_options: dict[str, object], producer_options: dict[str, object]) -> tuple[
        list[bytes], list[int], LossyProxy]:
    with BrokerThread(tmp_path / "data") as broker:
        proxy = LossyProxy(broker.port, **proxy_options)  # type: ignore[arg-type]
        try:
            broker.call(lambda: setattr(broker.broker, "config", dataclasses.replace(
                broker.broker.config, advertised_port=proxy.port)))
            broker.call(lambda: broker.broker.topics.create("ordered", 1))
            offsets = asyncio.run(_produce(f"127.0.0.1:{proxy.port}", "ordered", _sets(), **producer_options))
            return _stored(broker, "ordered"), offsets, proxy
        finally:
            proxy.close()


@pytest.mark.parametrize("lose", ["answer", "request"])
def test_idempotent_producer_with_five_in_flight_stores_each_record_once_in_send_order(
        tmp_path: Path, lose: str) -> None:
    # lose="answer": retries of batches the broker already has (answered with their offsets);
    # lose="request": a gap, so the batches behind it get OUT_OF_ORDER_SEQUENCE_NUMBER and
    # must be resent after it, in order.
    stored, offsets, proxy = _run(tmp_path, {"every": 37, "drops": 4, "lose": lose},
                                  {"max_in_flight": 5, "request_timeout_ms": 1_500})
    sent = [v for values in _sets() for v in values]
    assert proxy.dropped >= 3, "the test must have lost some requests or answers"
    assert proxy.max_outstanding > 1, "the producer never had two batches of the partition in flight"
    assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} record(s) stored twice"
    assert stored == sent
    assert offsets == [s * PER_SET for s in range(SETS)], "each set's future reports where it was stored"


@pytest.mark.parametrize("lose", ["answer", "request"])
def test_one_in_flight_without_idempotence_keeps_send_order(tmp_path: Path, lose: str) -> None:
    stored, _offsets, proxy = _run(tmp_path, {"every": 37, "drops": 4, "lose": lose},
                                   {"acks": 1, "max_in_flight": 1, "request_timeout_ms": 1_500})
    sent = [v for values in _sets() for v in values]
    assert proxy.dropped >= 3
    assert proxy.max_outstanding == 1
    # at least once: a lost answer's set is stored again by its retry (right after itself),
    # but no set is ever stored after a later one
    assert sorted(set(stored)) == sent
    set_numbers = [int(v) // PER_SET for v in stored]
    assert all(a <= b for a, b in zip(set_numbers, set_numbers[1:])), "a set was stored after a later one"


async def test_out_of_order_with_nothing_pending_fails_the_batch_with_what_to_do(pulllog_broker) -> None:
    # The broker already has sequences 0..2 of this producer id: the producer's own
    # sequence 0 is a gap that no earlier batch of its can fill, so it must not retry forever.
    from pulllog.client.errors import KafkaError
    from pulllog.records import build_batch

    from kafka_wire import WireClient, produce

    async with Producer(pulllog_broker.bootstrap_servers, retries=3) as producer:
        await producer.partitions_for("gap")
        with WireClient(pulllog_broker.port) as client:
            data = build_batch([(None, b"x")] * 3, producer_id=producer.producer_id,
                               producer_epoch=producer.producer_epoch, base_sequence=0)
            part = produce(client, "gap", 0, data, acks=-1).responses[0].partition_responses[0]
            assert part.error_code.value == 0
        future = await producer.send_batch("gap", [b"a"], partition=0)
        with pytest.raises(KafkaError) as failed:
            await future
    assert failed.value.code.value == 45
    assert "create a new one" in str(failed.value)


async def test_idempotent_producer_carries_on_in_order_across_a_broker_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The broker stops mid-stream with batches in flight (their answers lost or never
    # written) and comes back on the same port from the same log: the producer's retries
    # reconnect and each record is stored once, in send order.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "data"
    caplog.set_level(logging.DEBUG, logger="pulllog.client.producer")
    broker = BrokerThread(data, port=port).start()
    try:
        broker.call(lambda: broker.broker.topics.create("restart", 1))
        sets = _sets()
        async with Producer(f"127.0.0.1:{port}", batch_size=1, retry_backoff_ms=20, request_timeout_ms=3_000,
                            max_in_flight=5) as producer:
            futures = []
            for i, values in enumerate(sets):
                futures.append(await producer.send_batch("restart", values, partition=0))
                if i == SETS // 2:
                    await futures[0]  # the producer is under way: the stop cuts batches in flight
                    await asyncio.to_thread(broker.stop)
                    broker = await asyncio.to_thread(BrokerThread(data, port=port).start)
            results = await asyncio.gather(*futures)
        stored = _stored(broker, "restart")
    finally:
        broker.stop()
    assert any(r.getMessage().startswith(("retrying", "connecting to broker")) for r in caplog.records), \
        "the restart must have cut requests in flight or a connection"
    assert stored == [v for values in sets for v in values]
    assert [r.base_offset for r in results] == [s * PER_SET for s in range(SETS)]


async def test_batches_waiting_for_a_connection_that_fails_late_keep_their_order(tmp_path: Path) -> None:
    # The first connection to the partition's leader hangs, then ends unanswered, while the
    # producer holds more batches for that leader. None may reach the broker before the first:
    # the broker takes any sequence from a producer it has no state for (KIP-360), so a later
    # batch arriving first would be stored, out of order, and the first then refused as
    # OUT_OF_ORDER_SEQUENCE_NUMBER. (A broker restart before the first Produce did this.)
    sets = _sets()[:20]
    with BrokerThread(tmp_path / "data") as broker:
        proxy = LossyProxy(broker.port, every=1, drops=0, hold_first=True)
        try:
            broker.call(lambda: setattr(broker.broker, "config", dataclasses.replace(
                broker.broker.config, advertised_port=proxy.port)))
            broker.call(lambda: broker.broker.topics.create("gated", 1))
            async with Producer(f"127.0.0.1:{broker.port}", batch_size=1, retry_backoff_ms=10,
                                max_in_flight=5) as producer:  # bootstraps directly; the leader is behind the proxy
                futures = [await producer.send_batch("gated", values, partition=0) for values in sets]
                await wait_until(lambda: proxy.held, "the producer's first connection to the leader")
                proxy.release()
                results = await asyncio.gather(*futures)
            stored = _stored(broker, "gated")
        finally:
            proxy.close()
    assert stored == [v for values in sets for v in values]
    assert [r.base_offset for r in results] == [s * PER_SET for s in range(len(sets))]


async def test_after_a_lost_request_the_retries_go_with_the_whole_in_flight_window(tmp_path: Path) -> None:
    # One Produce request is lost: the batches behind it get OUT_OF_ORDER_SEQUENCE_NUMBER and,
    # once it times out, all are resent. The retries pipeline (several of the partition's
    # retried batches in flight at once, on one connection), not one at a time; order holds.
    sets = _sets()[:100]
    with BrokerThread(tmp_path / "data") as broker:
        proxy = LossyProxy(broker.port, every=20, drops=1, lose="request")
        try:
            broker.call(lambda: setattr(broker.broker, "config", dataclasses.replace(
                broker.broker.config, advertised_port=proxy.port)))
            broker.call(lambda: broker.broker.topics.create("recover", 1))
            async with Producer(f"127.0.0.1:{proxy.port}", batch_size=1, retry_backoff_ms=10, max_in_flight=5,
                                request_timeout_ms=1_500) as producer:
                sender = producer._sender
                send_request = sender._send_request
                retries_in_flight = [0]

                def counting(node, conn, batches, now):  # type: ignore[no-untyped-def]
                    flying = sender.in_flight("recover", 0)
                    retries_in_flight[0] = max(retries_in_flight[0], sum(1 for b in flying if b.attempts))
                    send_request(node, conn, batches, now)

                sender._send_request = counting
                futures = [await producer.send_batch("recover", values, partition=0) for values in sets]
                results = await asyncio.gather(*futures)
            stored = _stored(broker, "recover")
        finally:
            proxy.close()
    assert proxy.dropped == 1
    assert stored == [v for values in sets for v in values]
    assert [r.base_offset for r in results] == [s * PER_SET for s in range(len(sets))]
    assert retries_in_flight[0] > 1, "the retries went one at a time"


async def test_a_batch_the_broker_refuses_does_not_stop_the_idempotent_producer(pulllog_broker) -> None:
    # MESSAGE_TOO_LARGE stores nothing of the batch, so its sequence numbers are a gap the
    # broker would refuse every later batch of the partition for (OUT_OF_ORDER_SEQUENCE_NUMBER).
    # As Kafka's producer (KIP-360), pulllog's takes a new epoch and carries on, in order.
    from pulllog import Admin
    from pulllog.client.errors import KafkaError

    async with Admin(pulllog_broker.bootstrap_servers) as admin:
        await admin.create_topic("bounded", partitions=1, configs={"max.message.bytes": "2000"})
    values = [b"%04d" % i for i in range(300)]
    async with Producer(pulllog_broker.bootstrap_servers, batch_size=1) as producer:  # one batch per send
        assert producer.enable_idempotence
        epoch = producer.producer_epoch
        futures = [await producer.send("bounded", v, partition=0) for v in values[:100]]
        too_large = await producer.send("bounded", b"x" * 5000, partition=0)
        futures += [await producer.send("bounded", v, partition=0) for v in values[100:]]
        offsets = [(await f).offset for f in futures]
        with pytest.raises(KafkaError) as refused:
            await too_large
        assert producer.producer_epoch == epoch + 1
    assert refused.value.code.value == 10  # MESSAGE_TOO_LARGE
    assert offsets == list(range(300))
    assert _stored(pulllog_broker, "bounded") == values


async def test_send_skips_the_loop_turn_while_the_partitions_slots_are_all_in_flight(pulllog_broker) -> None:
    # send() yields after a record that opens a batch, so the sender ships it. With
    # batch_size=1 and every in-flight slot of the partition taken (the broker loses the
    # requests), the sender cannot ship it: a turn per record would only poll the socket, so
    # send() yields once per 16 such batches (enough for the loop to read the answers).
    pulllog_broker.call(pulllog_broker.broker.topics.create, "busy", 1, {})
    pulllog_broker.faults.lose_request(0, topic="busy", times=None)
    loop = asyncio.get_running_loop()
    turns = 0
    ticking = True

    def tick() -> None:
        nonlocal turns
        turns += 1
        if ticking:
            loop.call_soon(tick)

    producer = Producer(pulllog_broker.bootstrap_servers, batch_size=1, acks=1)
    await producer.start()
    try:
        await producer.partitions_for("busy")
        futures = [await producer.send("busy", b"%d" % i, partition=0) for i in range(5)]
        await wait_until(lambda: len(producer._sender.in_flight("busy", 0)) == 5, "five requests in flight")
        loop.call_soon(tick)
        await asyncio.sleep(0)  # tick runs once
        turns = 0
        futures += [await producer.send("busy", b"%d" % i, partition=0) for i in range(5, 20)]
        assert turns == 0  # 15 batches opened, not one loop turn
        futures.append(await producer.send("busy", b"20", partition=0))
        assert turns == 1  # the 16th yields
    finally:
        ticking = False
        pulllog_broker.faults.clear()
        await producer.close(timeout=0)  # the lost requests will never be answered


async def test_an_answer_that_frees_a_slot_has_the_next_request_written_in_the_same_turn(
        pulllog_broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # With a backlog of one-record batches and 5 in flight, the read that brings answers
    # writes the requests for the slots they freed itself (KafkaConnection.after_frames),
    # rather than waking the sender for a loop turn more; the window is full again after it.
    from pulllog.client import connection

    pulllog_broker.call(pulllog_broker.broker.topics.create, "refill", 1, {})
    reading = False
    writes: list[tuple[bool, int]] = []  # (written while handling a read, requests in flight after)
    buffer_updated, flush = connection._ResponseReader.buffer_updated, connection.KafkaConnection.flush

    def reading_buffer_updated(self: connection._ResponseReader, nbytes: int) -> None:
        nonlocal reading
        reading = True
        try:
            buffer_updated(self, nbytes)
        finally:
            reading = False

    def recording_flush(self: connection.KafkaConnection) -> None:
        flush(self)
        writes.append((reading, self.in_flight))

    monkeypatch.setattr(connection._ResponseReader, "buffer_updated", reading_buffer_updated)
    monkeypatch.setattr(connection.KafkaConnection, "flush", recording_flush)
    async with Producer(pulllog_broker.bootstrap_servers, batch_size=1, acks=1) as producer:
        await producer.partitions_for("refill")
        futures = [await producer.send("refill", b"%d" % i, partition=0) for i in range(200)]
        offsets = [(await f).offset for f in futures]
    assert offsets == list(range(200))
    in_reads = [in_flight for in_read, in_flight in writes if in_read]
    assert in_reads, "no request was written by the read that freed its slot"
    assert max(in_reads) == 5
