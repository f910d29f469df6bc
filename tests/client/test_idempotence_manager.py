"""The idempotence manager's rules (``pulllog.client.idempotence``), without a broker.

It does no I/O, so each rule is a plain test: what it stamps on a batch, when it asks for
an epoch bump (KIP-360), what InitProducerId it asks for, and how a new epoch restamps
the batches waiting for a retry. Batches are real ``ProducerBatch`` objects, sealed and
read back with the broker's own batch reader (CRC checked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pulllog.client.accumulator import ProducerBatch, encode_headers
from pulllog.client.idempotence import NO_PRODUCER_ID, IdempotenceManager, ProducerIdAndEpoch
from pulllog.records import Compression, RecordBatch

T0 = 1_700_000_000_000


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def batch(loop: asyncio.AbstractEventLoop, records: int, topic: str = "t", partition: int = 0) -> ProducerBatch:
    b = ProducerBatch(topic, partition, T0, 0.0, loop)
    for i in range(records):
        b.append(None, b"v%d" % i, encode_headers(None), T0)
    return b


def sealed(loop: asyncio.AbstractEventLoop, manager: IdempotenceManager, records: int,
           topic: str = "t", partition: int = 0) -> ProducerBatch:
    b = batch(loop, records, topic, partition)
    b.seal(Compression.NONE, *manager.stamp(b))
    return b


def on_the_wire(b: ProducerBatch) -> tuple[int, int, int]:
    assert b.wire is not None
    header = RecordBatch.from_bytes(b.wire).header  # checks the CRC
    return header.producer_id, header.producer_epoch, header.base_sequence


def started(producer_id: int = 7, epoch: int = 0) -> IdempotenceManager:
    manager = IdempotenceManager(enabled=True)
    manager.set_producer_id_and_epoch(producer_id, epoch)
    return manager


def test_without_idempotence_batches_carry_no_producer_id_and_no_bump_is_asked(
        loop: asyncio.AbstractEventLoop) -> None:
    manager = IdempotenceManager(enabled=False)
    b = sealed(loop, manager, 3)
    assert on_the_wire(b) == (-1, -1, -1)
    manager.batch_failed(b)
    assert manager.may_send() and not manager.epoch_bump_needed
    assert manager.may_send_retry(attempts=1, earlier_elsewhere=True)


def test_sequences_count_records_per_partition(loop: asyncio.AbstractEventLoop) -> None:
    manager = started(producer_id=7, epoch=2)
    assert on_the_wire(sealed(loop, manager, 3)) == (7, 2, 0)
    assert on_the_wire(sealed(loop, manager, 1, partition=1)) == (7, 2, 0)
    assert on_the_wire(sealed(loop, manager, 5)) == (7, 2, 3)
    assert on_the_wire(sealed(loop, manager, 2, topic="other")) == (7, 2, 0)
    assert (manager.next_sequence("t", 0), manager.next_sequence("t", 1)) == (8, 1)


def test_sequences_wrap_at_2_to_the_31(loop: asyncio.AbstractEventLoop) -> None:
    manager = started()
    manager._next_sequence[("t", 0)] = 2**31 - 2  # as if 2**31 - 2 records were sent
    assert on_the_wire(sealed(loop, manager, 3))[2] == 2**31 - 2
    assert manager.next_sequence("t", 0) == 1


def test_start_asks_for_a_new_producer_id() -> None:
    manager = IdempotenceManager(enabled=True)
    assert manager.producer_id_and_epoch == NO_PRODUCER_ID
    lowest, highest, data = manager.init_producer_id_request()
    assert (lowest, highest) == (0, 4)
    assert (data["producer_id"], data["producer_epoch"], data["transactional_id"]) == (-1, -1, None)


def test_a_sealed_batch_failing_for_good_stops_sending_until_the_next_epoch(loop: asyncio.AbstractEventLoop) -> None:
    manager = started(producer_id=7, epoch=0)
    failed = sealed(loop, manager, 2)
    manager.batch_failed(failed)
    assert manager.epoch_bump_needed and not manager.may_send()
    # KIP-360: InitProducerId v3+ with our id and epoch asks for the next epoch of the same id
    lowest, highest, data = manager.init_producer_id_request()
    assert (lowest, highest) == (3, 4)
    assert (data["producer_id"], data["producer_epoch"]) == (7, 0)
    manager.set_producer_id_and_epoch(7, 1)
    assert manager.may_send() and manager.producer_id_and_epoch == ProducerIdAndEpoch(7, 1)
    assert on_the_wire(sealed(loop, manager, 1)) == (7, 1, 0)  # the partition starts again at 0


def test_an_unsealed_batch_failing_leaves_no_gap(loop: asyncio.AbstractEventLoop) -> None:
    manager = started()
    manager.batch_failed(batch(loop, 2))  # never sent: it took no sequence numbers
    assert manager.may_send() and not manager.epoch_bump_needed


def test_batches_failing_while_the_producer_closes_ask_for_no_bump(loop: asyncio.AbstractEventLoop) -> None:
    manager = started()
    manager.batch_failed(sealed(loop, manager, 2), closing=True)
    assert manager.may_send() and not manager.epoch_bump_needed


def test_a_new_epoch_restamps_the_sealed_batches_waiting_for_a_retry_in_order(
        loop: asyncio.AbstractEventLoop) -> None:
    manager = started(producer_id=7, epoch=0)
    failed = sealed(loop, manager, 4)  # sequences 0-3
    a0, a1 = sealed(loop, manager, 2), sealed(loop, manager, 3)  # 4-5, 6-8: waiting for their retry
    b0 = sealed(loop, manager, 5, partition=1)  # 0-4
    unsealed = batch(loop, 1)
    manager.batch_failed(failed)
    manager.set_producer_id_and_epoch(7, 1, [a0, a1, unsealed, b0])
    assert [on_the_wire(b) for b in (a0, a1, b0)] == [(7, 1, 0), (7, 1, 2), (7, 1, 0)]
    assert unsealed.wire is None  # it gets its sequence when first sent, after the restamped ones
    assert on_the_wire(sealed(loop, manager, 1)) == (7, 1, 5)
    assert [r.value for r in RecordBatch.from_bytes(a1.wire).records()] == [b"v0", b"v1", b"v2"]  # type: ignore[arg-type]


def test_a_broker_without_kip_360_leaves_the_producer_on_its_epoch(loop: asyncio.AbstractEventLoop) -> None:
    manager = started(producer_id=7, epoch=0)
    manager.batch_failed(sealed(loop, manager, 1))
    manager.epoch_bump_unsupported()
    assert manager.may_send() and manager.producer_id_and_epoch == ProducerIdAndEpoch(7, 0)
    assert on_the_wire(sealed(loop, manager, 1)) == (7, 0, 1)


def test_out_of_order_is_retried_only_behind_a_pending_batch_or_a_pending_bump(
        loop: asyncio.AbstractEventLoop) -> None:
    manager = started()
    assert manager.out_of_order_retriable(earlier_unacknowledged=True)
    assert not manager.out_of_order_retriable(earlier_unacknowledged=False)
    manager.batch_failed(sealed(loop, manager, 1))
    assert manager.out_of_order_retriable(earlier_unacknowledged=False)


def test_a_retry_waits_for_earlier_batches_in_flight_on_another_connection() -> None:
    manager = started()
    assert not manager.may_send_retry(attempts=1, earlier_elsewhere=True)
    assert manager.may_send_retry(attempts=1, earlier_elsewhere=False)  # pipelines behind them
    assert manager.may_send_retry(attempts=0, earlier_elsewhere=True)  # a first send pipelines
