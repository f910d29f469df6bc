"""The asyncio Producer: partition, batch, send, retry, acknowledge.

Usage::

    async with Producer("127.0.0.1:9092", acks="all", compression="zstd") as producer:
        future = await producer.send("events", b"value", key=b"user-42")  # queued
        metadata = await future                                            # acknowledged
        await producer.send_and_wait("events", b"another")                 # both at once
        batch = await (await producer.send_batch("events", [b"a", b"b", b"c"]))

``send()`` returns as soon as the record is encoded into its partition's open batch (it
waits only for buffer space, or for a new topic's metadata); the future it returns resolves
to a ``RecordMetadata`` when the broker acknowledges the batch, or fails with the reason.
That future is a ``RecordFuture`` (``pulllog.client.record_future``): as in Kafka's Java
client it only points at its batch's one result, so a batch completes with one
``set_result`` however many records it holds, and the ``RecordMetadata`` is built when
asked. asyncio treats it as a future (await, gather, wait, wait_for, callbacks).
``send_batch()`` sends a message set, the paper's unit of publishing: the records are
appended contiguously to one partition in one RecordBatch, and one future resolves to a
``BatchMetadata`` for all of them. It skips the per-record call and future, most of what
a record costs in ``send()`` (scripts/bench_client.py measures both).

How records move (see ``pulllog.client.accumulator`` for the batch states):

* **One supervisor task** per producer, the same :class:`~pulllog.client.task_scope.TaskScope`
  the consumer and the cluster use, opened by ``start()``, stopped and joined by ``close()``.
  Its one child runs the sender (``pulllog.client.sender``), whose ``asyncio.TaskGroup``
  owns the Produce requests in flight, the metadata refreshes and the epoch bumps, and
  then fails what is left and closes the connections, so nothing the producer starts
  outlives it. The settings are checked in one place, ``ProducerConfig``
  (``pulllog.client.producer_config``).
* **Batching.** Each partition has one open batch. It becomes sendable when it is full
  (``batch_size``: 256 KiB by default, not Kafka's 16 KiB, because each request costs a
  Python client a fixed ~100 µs: per-record ``send()`` measured ~1.4x the messages/s with
  it), when it is ``linger_ms`` old, or at ``flush()``. With ``linger_ms=0``
  an open batch is sendable at once if nothing of its partition is in flight; otherwise it
  keeps filling until an answer comes (or it is full), so batches still form under load.
  Closed batches (full ones, and sets that filled a batch) pipeline: up to ``max_in_flight``
  batches per partition are in flight, each in its own request, as a Produce request
  carries one batch per partition (as Kafka requires) for all ready partitions led by the
  same broker, up to ``max_request_size``; at most ``max_in_flight`` requests per broker
  connection. ``send()``'s common case (the partition it appended to last, room in its
  open batch) runs in C (``records.encoding.SendPath``), and so does a record, or a
  ``send_batch()`` set of plain values (``records.encoding.SetPath``), that opens a batch of
  the explicit partition the C path is armed for (a ``batch_size=1`` producer's every one). ``send()`` yields to the event
  loop once per new batch, so the sender ships full batches while a tight loop keeps
  sending (and every 16 records while a partition
  new to a transaction waits for AddPartitionsToTxn: ``pulllog.client.transactions``).
* **Partitioning** (``pulllog.client.partitioner``): explicit partition, else murmur2 of
  the key as the Java client and librdkafka's ``murmur2_random`` do, else sticky. A
  record without a key that would overflow the sticky partition's open batch closes it
  and is partitioned again, so it starts the next batch on the next sticky partition.
* **Ordering and retries.** A batch that fails with a retriable error (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, a lost connection, a request timeout, ...) goes back into its
  partition's queue in its original place (by the order batches closed: later batches
  that failed too stay behind it) and is resent after ``retry_backoff_ms`` with the same
  bytes. With idempotence (the default, see below) order and exactly-once storage hold
  with several batches in flight: the broker stores a batch only if its sequence follows
  the last one stored, answers a resent batch it already has with its original offset, and
  refuses a gap with OUT_OF_ORDER_SEQUENCE_NUMBER. That answer is retried while an earlier
  batch of the partition is unacknowledged (the gap is that batch); otherwise it fails the
  batch. Batches are written only on an open connection, in order; a partition's retries
  pipeline like first sends (up to ``max_in_flight``) once no earlier batch of the partition
  is still in flight on a connection that failed, and nothing newer of the partition is
  sent while a retry waits. Without idempotence a
  retried batch can land after batches that were in flight behind it (as in Kafka); with
  ``max_in_flight=1`` a partition has one batch in flight and order is strict. Errors
  that say metadata is stale also refresh it. A batch fails for good after ``retries``
  retries, on a non-retriable error (its future gets a ``KafkaError`` naming the code,
  e.g. MESSAGE_TOO_LARGE, with the broker's message; a batch of several records refused as
  MESSAGE_TOO_LARGE is split and resent instead, ``pulllog.client.accumulator``), or
  ``delivery_timeout_ms`` after
  it was created (``DeliveryTimeoutError``). Without idempotence a request that timed out
  may still have been appended, so a retry can duplicate it (at-least-once, as in Kafka).
* **Idempotence** (``enable_idempotence``, on by default as in Kafka 3.0+, with
  ``acks="all"``): InitProducerId at start, and each batch carries the producer id, epoch
  and a base sequence (per partition, counted in records) assigned when it is first sent
  and kept on retries. Left unset, it turns off when ``acks`` is 0 or 1 or
  ``max_in_flight`` is above 5 (the broker remembers 5 batches per producer and
  partition); set to True with those it is a ValueError. A batch that fails for good
  leaves a gap in its partition's sequence numbers that the broker would refuse every
  later batch for, so the producer then waits for its in-flight answers, takes the next
  epoch of its producer id (InitProducerId with its id and epoch, KIP-360), restamps the
  batches waiting for a retry and starts every partition again at sequence 0, as Kafka's
  producer does (``pulllog.client.idempotence`` keeps these rules).
* **Back-pressure.** ``buffer_memory`` bounds the bytes of records not yet acknowledged;
  a ``send()`` that does not fit waits, up to ``max_block_ms``, then raises
  ``BufferExhaustedError``. ``max_block_ms`` also bounds the wait for a new topic's
  metadata. Metadata is fetched with ``allow_auto_topic_creation`` as Kafka clients do.
* ``acks=0``: a batch is done when its request is written; its records report offset -1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ..records.compression import Compression
from ..records.encoding import SendPath, SetPath, now_ms, ready, values_size
from .accumulator import (
    NEW_BATCH,
    RECORD_OVERHEAD,
    REROUTE,
    PartitionQueue,
    ProducerBatch,
    RecordAccumulator,
    encode_headers,
    estimate_set_size,
    new_record_future,
)
from .cluster import DEFAULT_BOOTSTRAP, Cluster
from .connection import BrokerUnreachableError
from .errors import KafkaError, UnknownTopicError
from .idempotence import IdempotenceManager
from .partitioner import (
    Partitioner,
    PartitionerCallable,
    StickyPartitioner,
    make_partitioner,
)
from .producer_config import MAX_IDEMPOTENT_IN_FLIGHT, ProducerConfig
from .record_future import (
    BatchMetadata,
    DeliveryTimeoutError,
    ProducerClosedError,
    ProduceResult,
    RecordFuture,
)
from .sender import Sender
from .task_scope import TaskScope, join_despite_cancellation
from .transactions import (
    AbortableTransactionError,
    FatalTransactionError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionManager,
    TransactionState,
    TransactionStateError,
)
from .txn_coordinator import TxnCoordinatorClient
from .types import ConsumerGroupMetadata, RecordMetadata, TopicPartition

__all__ = [
    "MAX_IDEMPOTENT_IN_FLIGHT",
    "AbortableTransactionError",
    "BatchMetadata",
    "BufferExhaustedError",
    "ConsumerGroupMetadata",
    "FatalTransactionError",
    "ProducerFencedError",
    "TransactionAbortedError",
    "TransactionStateError",
    "DeliveryTimeoutError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordFuture",
    "RecordMetadata",
]

log = logging.getLogger("pulllog.client.producer")
_F = TypeVar("_F")

# buffer_memory for a record without key or headers, on top of its value: the allowance and
# the one byte of its empty headers
_PLAIN_RECORD_SIZE = RECORD_OVERHEAD + 1

_NEW, _RUNNING, _CLOSING, _CLOSED = "new", "running", "closing", "closed"

# While a partition new to the transaction waits for AddPartitionsToTxn and its first answer,
# send() yields every this many records (a turn of the event loop costs about as much as
# appending a few records; a batch of them, well under a millisecond)
_STARTING_YIELD_EVERY = 16
# send() yields after a record that opens a batch, so the sender can ship it in a loop turn;
# while all of the partition's in-flight slots are taken it cannot, and only every this many
# such batches does send() (or send_batch()) yield, for the loop to read the answers (a batch_size=1 producer
# otherwise spent a loop turn per record that did nothing but poll the socket)
_BUSY_YIELD_EVERY = 16
# ... but never more than this many bytes of batches (batch_size each) between two such turns:
# every batch at the default 256 KiB. Meanwhile the broker works off the batches in flight and
# then waits for the answers to be read; a producer whose send() never waits for buffer
# space (a transaction starts with an empty buffer and gains 1-4 MiB in 100 ms) otherwise
# appended 16 full batches, 4 MiB and milliseconds, between the turns that refill the slots.
_BUSY_YIELD_BYTES = 256 * 1024


class _BusyBatches:
    """The yield rule's count of batches opened while their partition was busy (one slot:
    the C send path reads and writes it too)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class BufferExhaustedError(TimeoutError):
    """send() waited ``max_block_ms`` for ``buffer_memory`` to free up."""


class Producer:
    """An asyncio Kafka producer; see the module docstring for how it batches and retries."""

    # send()'s common case in C where the extension is built (``_install_send_path``); the
    # tests that compare it with the Python path turn it off here
    use_send_path = True

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "pulllog-producer",
        acks: int | str | None = None,
        compression: str | Compression | None = None,
        batch_size: int = 262_144,
        linger_ms: float = 0,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        max_request_size: int = 1_048_576,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight: int = 5,
        partitioner: str | PartitionerCallable | Partitioner = "sticky",
        enable_idempotence: bool | None = None,
        metadata_max_age_ms: int = 300_000,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        """A producer for ``bootstrap_servers`` (host:port, one or several).

        The settings are ``ProducerConfig``'s, described there with their Kafka names
        (``acks``, ``compression``, ``batch_size``, ``linger_ms``, ``buffer_memory``,
        ``max_block_ms``, ``max_request_size``, ``retries``, ``retry_backoff_ms``,
        ``delivery_timeout_ms``, ``request_timeout_ms``, ``max_in_flight``, ``partitioner``,
        ``enable_idempotence``, ``metadata_max_age_ms``, ``transactional_id``,
        ``transaction_timeout_ms``); a bad one is a ValueError here.
        ``producer.config`` is the resolved ``ProducerConfig``.
        """
        config = ProducerConfig(
            bootstrap_servers=bootstrap_servers, client_id=client_id, acks=acks, compression=compression,
            batch_size=batch_size, linger_ms=linger_ms, buffer_memory=buffer_memory, max_block_ms=max_block_ms,
            max_request_size=max_request_size, retries=retries, retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms,
            max_in_flight=max_in_flight, partitioner=partitioner, enable_idempotence=enable_idempotence,
            metadata_max_age_ms=metadata_max_age_ms, transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms)
        self.config = config
        # the resolved settings, as attributes (send() reads some on every record)
        self.client_id = client_id
        self.acks: int = config.acks  # type: ignore[assignment]
        self.enable_idempotence: bool = config.enable_idempotence  # type: ignore[assignment]
        self.compression: Compression = config.compression  # type: ignore[assignment]
        self.batch_size = config.batch_bytes
        self.linger_s = config.linger_s
        self.buffer_memory = buffer_memory
        self.max_block_s = config.max_block_s
        self.max_request_size = max_request_size
        self.retries = retries
        self.retry_backoff_s = config.retry_backoff_s
        self.delivery_timeout_s = config.delivery_timeout_s
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.metadata_max_age_s = config.metadata_max_age_s
        self._partitioner = make_partitioner(partitioner)
        self._sticky = isinstance(self._partitioner, StickyPartitioner)
        # the C send path may take partition=None as the sticky partition it was armed with:
        # only the built-in partitioner's choice is known not to move until a batch closes
        self._sticky_known = type(self._partitioner) is StickyPartitioner
        # send()'s common case in C (records.encoding.SendPath), installed by start() as the
        # instance's ``send``; None without the extension or for a transactional producer
        self._fast: Any = None
        self._cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                metadata_max_age_ms=metadata_max_age_ms)
        # a transactional producer's state (None otherwise), the same object as _idempotence
        self._txn: TransactionManager | None = None
        self._idempotence: IdempotenceManager
        if transactional_id is not None:
            self._txn = self._idempotence = TransactionManager(
                transactional_id, transaction_timeout_ms=transaction_timeout_ms)
        else:
            self._idempotence = IdempotenceManager(enabled=self.enable_idempotence)
        self._txn_client: TxnCoordinatorClient | None = None
        self._state = _NEW
        self._accepting = False  # running, and the sender is healthy: send() may queue
        # batches opened without a yield since the last (_BUSY_YIELD_EVERY), counted by the
        # Python send() and send_batch() and by the C send path alike
        self._busy = _BusyBatches()
        self._busy_yield_every = max(1, min(_BUSY_YIELD_EVERY, _BUSY_YIELD_BYTES // max(self.batch_size, 1)))
        self._max_record_size = config.max_record_size
        self._loop: asyncio.AbstractEventLoop | None = None
        self._new_future: Callable[[], asyncio.Future[Any]] = asyncio.Future  # the loop's create_future, at start()
        self._acc: RecordAccumulator | None = None
        self._sender: Sender | None = None
        self._tasks: TaskScope | None = None  # the supervisor: owns the sender's task
        self._sender_task: asyncio.Task[None] | None = None
        self._sender_error: BaseException | None = None
        self._wakeup = asyncio.Event()
        # topic -> (all partitions, partitions with a leader), what send() partitions by
        self._partitions: dict[str, tuple[list[int], list[int]]] = {}
        self._topic_lock = asyncio.Lock()

    @property
    def producer_id(self) -> int:
        """The producer id from InitProducerId (-1 without idempotence)."""
        return self._idempotence.producer_id

    @property
    def producer_epoch(self) -> int:
        """The producer id's current epoch (-1 without idempotence)."""
        return self._idempotence.producer_epoch

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Producer":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def start(self) -> None:
        """Reach the cluster (fails fast if no bootstrap server answers) and start the sender."""
        if self._state != _NEW:
            if self._state == _RUNNING:
                return
            raise ProducerClosedError("this producer was closed; create a new one")
        self._loop = asyncio.get_running_loop()
        self._acc = RecordAccumulator(batch_size=self.batch_size, buffer_memory=self.buffer_memory,
                                      loop=self._loop, on_batch_closed=self._batch_closed, wake=self._wakeup.set)
        self._sender = Sender(self.config, self._cluster, self._acc, self._idempotence, self._wakeup,
                              topics=self._partitions, on_metadata=self._update_partitions,
                              on_failure=self._sender_failed)
        self._acc.partition_busy = self._sender.partition_busy
        self._tasks = TaskScope(f"pulllog-producer[{self.client_id}]")
        try:
            await self._cluster.refresh([])
            self._sender.last_metadata = time.monotonic()
            if self._txn is not None:
                self._txn_client = self._sender.txn_coordinator = TxnCoordinatorClient(
                    self._cluster, self._txn, request_timeout_ms=self.request_timeout_ms,
                    retry_backoff_ms=self.config.retry_backoff_ms, max_block_ms=self.config.max_block_ms)
            elif self.enable_idempotence:  # a transactional producer's comes with init_transactions()
                await self._sender.init_producer_id()
            await self._tasks.open()
        except BaseException:
            await self._tasks.aclose()
            await self._cluster.close()
            self._state = _CLOSED
            raise
        self._pool = self._acc.pool
        loop = self._loop
        if type(loop).create_future is asyncio.BaseEventLoop.create_future:
            # what the default loop's create_future makes, without its Python frame (once per set)
            self._new_future = functools.partial(asyncio.Future, loop=loop)
        else:
            self._new_future = loop.create_future
        self._state = _RUNNING
        self._accepting = True
        self._install_send_path()
        self._sender_task = self._tasks.spawn(self._run_sender(), name=f"pulllog-producer-sender[{self.client_id}]")

    def _install_send_path(self) -> None:
        """send()'s common case in C: ``self.send`` becomes a ``SendPath`` that appends a record
        to the partition it was armed for (by the Python ``send()`` that appended there last)
        and calls the Python ``send()`` for everything else. Not for a subclass that
        overrides ``send``; ``use_send_path = False`` on the class keeps the Python path.
        A transactional producer's Python ``send()`` arms it only for the partition the
        transaction lets through unchecked (``TransactionManager.fast_topic``), and the
        manager disarms it whenever that ends (a state change, a new partition starting)."""
        acc = self._acc
        if (SendPath is None or not self.use_send_path or acc is None
                or type(self).send is not Producer.send):
            return
        self._fast = SendPath(Producer.send.__get__(self, type(self)), acc.pool, acc.close, PartitionQueue,
                              ProducerBatch, acc.batch_size, acc.room, self._max_record_size, _PLAIN_RECORD_SIZE)
        sender = self._sender
        if acc.makers is not None and sender is not None:
            # a record that opens a batch of an explicit partition in C too (a batch_size=1
            # producer's every record): RecordAccumulator.append's new batch, the producer's
            # yield rule, the partition's slots read from the sender's in-flight map
            make_result, make_batch = acc.makers
            self._fast.opening(make_result, make_batch, ProducerBatch.builder, new_record_future, acc.incomplete,
                               sender.in_flight_map, self.config.partition_in_flight, self._wakeup.set,
                               self._batch_closed, self._partitioner.sticky if self._sticky_known else None,  # type: ignore[attr-defined]
                               self._busy, self._busy_yield_every, self._yield_with)
            if SetPath is not None and self._txn is None and type(self).send_batch is Producer.send_batch:
                # send_batch()'s set that opens a batch (a batch_size=1 producer's every set) in C
                self.send_batch = SetPath(  # type: ignore[method-assign]
                    self._fast, Producer.send_batch.__get__(self, type(self)), self._new_future, RECORD_OVERHEAD)
        self.send = self._fast  # type: ignore[method-assign]
        if self._txn is not None:
            self._txn.fast_path_lost = self._disarm

    def _disarm(self) -> None:
        """Stop the C send path appending until the Python send() arms it again: called whenever
        what it was armed with may have changed (a batch closed, so the sticky partition may
        have moved; metadata changed; the producer stopped accepting)."""
        fast = self._fast
        if fast is not None:
            fast.disarm()

    async def _run_sender(self) -> None:
        """The supervisor's one child: run the sender (its task group owns every request) until
        close() stops it, then fail what is left and close the connections. Never raises
        (``Sender.run`` turns a bug into failed records; closing swallows its errors)."""
        try:
            await self._sender.run()  # type: ignore[union-attr]
        finally:
            await self._shut_down()

    async def _shut_down(self) -> None:
        """After the sender stopped: records still pending fail, connections close (once)."""
        sender, self._sender = self._sender, None
        if sender is None:
            return
        sender.closed = True
        sender.abort(ProducerClosedError("the producer was closed before the record was sent"))
        try:
            await self._cluster.close()
        except Exception as exc:
            log.debug("closing the producer's connections failed: %r", exc)

    def _sender_failed(self, error: BaseException) -> None:
        self._sender_error = error
        self._accepting = False
        self._disarm()

    async def flush(self, timeout: float | None = None) -> None:
        """Send every record queued so far, now (ignoring linger_ms), and wait for the outcomes.

        Outcomes, not successes: records that fail are reported through their futures.
        """
        if self._acc is None:
            return
        batches = list(self._acc.incomplete)
        if not batches:
            return
        self._acc.flushing += 1
        self._wakeup.set()
        try:
            # Each partition's newest batch first: a partition's batches mostly complete in
            # order, so by then most others are done too and only the few still pending get
            # a done-callback (asyncio.wait puts one on each future it waits for, an event-loop
            # callback per batch when it completes: one per record with batch_size=1).
            newest: dict[tuple[str, int], ProducerBatch] = {}
            for batch in batches:
                key = (batch.topic, batch.partition)
                other = newest.get(key)
                if other is None or other.created < batch.created:
                    newest[key] = batch
            deadline = None if timeout is None else time.monotonic() + timeout
            await asyncio.wait([batch.done for batch in newest.values()], timeout=timeout)
            pending = [batch.done for batch in batches if not batch.result.finished]
            if pending:
                await asyncio.wait(pending, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        finally:
            self._acc.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds, else until every record has an outcome), then stop.

        Records still unsent when the timeout passes fail with ProducerClosedError.
        """
        if self._state in (_CLOSING, _CLOSED):
            return
        was_running = self._state == _RUNNING
        if was_running and self._txn is not None and self._sender_error is None:
            await self._abort_on_close(timeout)
        self._state = _CLOSING
        self._accepting = False
        self._disarm()
        try:
            if self._sender is not None:
                self._sender.closing = True  # open batches go now, linger or not
                if was_running and self._sender_error is None:
                    await self.flush(timeout)
        finally:
            # Cancelling close() (or an anyio scope around it) cuts the flush short, but the
            # sender (its requests, the connections) is still stopped and joined before it
            # returns. It is told to stop rather than cancelled, so it shuts down (fails
            # what is pending, closes the connections) even if it has not run yet.
            task, self._sender_task = self._sender_task, None
            tasks, self._tasks = self._tasks, None
            cancelled = False
            if task is not None:
                if self._sender is not None:
                    self._sender.stop()
                cancelled = await join_despite_cancellation(task)
            try:
                if tasks is not None:
                    await tasks.aclose()  # nothing is left in it: the supervisor ends at once
            finally:
                self._state = _CLOSED
            if cancelled:
                raise asyncio.CancelledError()

    @property
    def sender_task(self) -> asyncio.Task[None] | None:
        """The task that runs the sender, a child of the producer's supervisor (None before
        start and after close)."""
        return self._sender_task

    # ------------------------------------------------------------------ transactions

    def _transactional(self, what: str) -> TransactionManager:
        self._check_running()
        if self._txn is None:
            raise TransactionStateError(f"{what} needs a transactional producer: create it with "
                                        "Producer(..., transactional_id='...')")
        return self._txn

    @property
    def transaction_state(self) -> TransactionState | None:
        """The transactional state (Kafka's names), None for a producer without a transactional_id."""
        return self._txn.state if self._txn is not None else None

    async def init_transactions(self) -> None:
        """Register the transactional id with its coordinator (once, before the first
        transaction): takes the id's producer id with a new epoch, which fences any older
        producer with the same transactional_id, after the coordinator finished (aborted)
        that producer's open transaction. Raises ProducerFencedError and other
        FatalTransactionErrors, or TimeoutError after max_block_ms (call it again)."""
        txn = self._transactional("init_transactions()")
        if txn.state is TransactionState.UNINITIALIZED:
            txn.transition(TransactionState.INITIALIZING)
        else:
            txn.require("init_transactions()", TransactionState.INITIALIZING)
        await self._new_epoch(txn)

    async def _new_epoch(self, txn: TransactionManager) -> None:
        producer_id, epoch = await self._txn_client.init_producer_id()  # type: ignore[union-attr]
        txn.set_producer_id_and_epoch(producer_id, epoch, self._acc.waiting() if self._acc else ())
        txn.transition(TransactionState.READY)

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent from now on, and the offsets given to
        send_offsets_to_transaction(), are written all or nothing."""
        self._transactional("begin_transaction()").begin()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[Any, Any],
            group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit ``offsets`` ({TopicPartition: offset or OffsetAndMetadata}) for the consumer
        group of ``group_metadata`` (``consumer.group_metadata()``; a group id alone skips the
        coordinator's generation check) as part of the transaction: they become the group's
        committed offsets if and only if the transaction commits (consume-transform-produce)."""
        txn = self._transactional("send_offsets_to_transaction()")
        if txn.state is not TransactionState.IN_TRANSACTION:
            _raise_state_error(txn, "send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        wanted: dict[tuple[str, int], tuple[int, str | None]] = {}
        for tp, value in offsets.items():
            offset = value if isinstance(value, int) else int(value.offset)
            metadata = None if isinstance(value, int) else getattr(value, "metadata", None)
            topic, partition = (tp.topic, tp.partition) if isinstance(tp, TopicPartition) else tp
            wanted[(topic, int(partition))] = (offset, metadata or "")
        client = self._txn_client
        assert client is not None
        await client.add_offsets(group_metadata.group_id)
        txn.offsets_added()
        if wanted:
            await client.txn_offset_commit(wanted, group_metadata.group_id, group_metadata.generation_id,
                                           group_metadata.member_id, group_metadata.group_instance_id)

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it (EndTxn): its records become
        visible to read_committed consumers and its offsets the group's committed ones.
        A failed record makes it raise AbortableTransactionError (then abort_transaction());
        ProducerFencedError and other FatalTransactionErrors mean: close the producer.
        TimeoutError after max_block_ms: call it again to resume."""
        txn = self._transactional("commit_transaction()")
        if txn.state is TransactionState.ABORTABLE_ERROR:
            _raise_state_error(txn, "commit_transaction()")
        txn.start_commit()
        self._wakeup.set()
        await self.flush()
        await self._sender.add_partitions_done()  # type: ignore[union-attr]
        if txn.state is not TransactionState.COMMITTING_TRANSACTION:
            _raise_state_error(txn, "commit_transaction()")  # a record failed: abortable (or fatal)
        if txn.transaction_started:
            await self._txn_client.end_txn(commit=True)  # type: ignore[union-attr]
        txn.completed()

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError, the
        coordinator writes abort markers, so no read_committed consumer ever sees its records,
        and its offsets are dropped. Also the way out of an AbortableTransactionError."""
        txn = self._transactional("abort_transaction()")
        txn.start_abort()
        self._wakeup.set()  # the sender fails the unsent batches
        await self.flush()  # and those in flight are answered
        await self._sender.add_partitions_done()  # type: ignore[union-attr]
        if txn.transaction_started:
            await self._txn_client.end_txn(commit=False)  # type: ignore[union-attr]
        if txn.epoch_bump_required:
            # a batch failed after it had sequence numbers: they would be a gap (KIP-360)
            txn.forget_transaction()
            txn.transition(TransactionState.INITIALIZING)
            await self._new_epoch(txn)  # then READY
        else:
            txn.completed()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator["Producer"]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it when the block (or the commit) raises; the error goes on."""
        self.begin_transaction()
        try:
            yield self
            await self.commit_transaction()
        except BaseException as exc:
            txn = self._txn
            if txn is not None and txn.state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR,
                                                 TransactionState.ABORTING_TRANSACTION):
                try:
                    await self.abort_transaction()
                except Exception as abort_error:
                    log.warning("aborting the transaction after %r failed: %s", exc, abort_error)
            raise

    async def _abort_on_close(self, timeout: float | None) -> None:
        """close() in the middle of a transaction aborts it, as Kafka's producer does."""
        txn = self._txn
        if txn is None or txn.state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            return
        log.info("aborting the open transaction of %r at close", txn.transactional_id)
        try:
            async with asyncio.timeout(timeout):
                await self.abort_transaction()
        except Exception as exc:
            log.warning("aborting the open transaction at close failed: %s", exc)

    def _check_running(self) -> None:
        if self._state == _RUNNING:
            if self._sender_error is not None:
                raise ProducerClosedError(f"the producer's sender failed ({self._sender_error!r}); "
                                          "close it and create a new one") from self._sender_error
            return
        if self._state == _NEW:
            raise ProducerClosedError("the producer is not started: `await producer.start()` "
                                      "or use `async with Producer(...)`")
        raise ProducerClosedError("the producer is closed; create a new one to send more")

    # ------------------------------------------------------------------ sending

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> Awaitable[RecordFuture]:
        """Queue one record; ``await`` it for a future of its RecordMetadata.

        Waits only for buffer space (``max_block_ms``) or, for a topic not seen yet, its
        metadata. ``headers`` are (str, bytes or None) pairs or a mapping; ``timestamp`` is
        ms since the epoch (default: now). The future fails with a ``KafkaError`` naming the
        broker's error code, ``DeliveryTimeoutError`` or ``ProducerClosedError``. It is a
        ``RecordFuture``, which asyncio treats as a future (await, gather, wait, wait_for,
        add_done_callback); cancelling it detaches only it: the record is still sent.

        ``send()`` is awaited as aiokafka's is, but it is not a coroutine function: it returns
        an awaitable. When nothing needs waiting (the topic known, buffer space free, no
        transaction) the call itself appends the record, and unless the record opened a
        batch (then the awaitable yields to the sender first) the awaitable gives its future
        at once (``pulllog.records.encoding.ready``: an ``async def`` would cost as much as
        the append); otherwise it is the coroutine that waits. Errors are raised by the
        ``await`` either way.

        Where the C extension is built, a started producer's ``send`` attribute is a
        ``records.encoding.SendPath`` in front of this method: it appends a record for the
        partition this method appended to last (no headers; a key only with an explicit
        partition; room in the open batch, buffer memory free) with no Python frame, and
        calls this method with the same arguments for everything else. The two are tested to
        store the same bytes (tests/client/test_producer_send_path.py).
        """
        # The hot path of per-record sending: keep it free of calls that are not needed.
        # Anything unusual (a wait, a transaction's check or its new partition, an error to
        # raise) takes _send, the coroutine, before anything of the record is taken: it does
        # all of it again. A transaction's record to the partition it passed last, with no
        # partition starting (TransactionManager.fast_topic), needs nothing more.
        txn = self._txn
        if not self._accepting or (txn is not None and (
                topic is not txn.fast_topic or partition != txn.fast_partition)):
            return self._send(topic, value, key, headers, partition, timestamp)
        parts = self._partitions.get(topic)
        if parts is None:
            return self._send(topic, value, key, headers, partition, timestamp)
        try:
            if key is None and headers is None:  # the common case: one length to add
                hdrs = b"\x00"
                size = (len(value) if value is not None else 0) + _PLAIN_RECORD_SIZE
            else:
                if key is not None and type(key) is not bytes:
                    key = _as_bytes(key)
                hdrs = encode_headers(headers) if headers else b"\x00"
                size = ((len(value) if value is not None else 0) + (len(key) if key is not None else 0)
                        + len(hdrs) + RECORD_OVERHEAD)
        except TypeError:
            return self._send(topic, value, key, headers, partition, timestamp)
        pool = self._pool
        if size > self._max_record_size or size > pool.available or pool.waiters:
            return self._send(topic, value, key, headers, partition, timestamp)
        # from here on nothing goes back to _send: a partitioner may count its calls
        try:
            if partition is None:
                sticky = key is None and self._sticky
                partition = self._partitioner.partition(topic, key, parts[0], parts[1])
            else:
                sticky = False
                if not 0 <= partition < len(parts[0]):
                    return _raise(_no_such_partition(topic, partition, parts[0]))
        except TypeError as exc:
            return _raise(_bad_record(key, value, exc))
        if timestamp is None:
            timestamp = now_ms()
        pool.available -= size
        acc = self._acc
        assert acc is not None
        try:
            future = acc.append(topic, partition, key, value, hdrs, timestamp, size, sticky)
            if future is None:  # the sticky partition's batch was full: it moved on
                partition = self._partitioner.partition(topic, key, parts[0], parts[1])
                future = acc.append(topic, partition, key, value, hdrs, timestamp, size)
                assert future is not None
        except TypeError as exc:
            pool.release(size)
            return _raise(_bad_record(key, value, exc))
        fast = self._fast
        if fast is not None:  # the C send path takes this partition's next records (an arm per batch)
            q = acc.last  # the queue the record went to
            # after a batch that closed at once (batch_size=1) only for an explicit partition:
            # the C path then opens the next batch itself (the sticky one may have moved)
            if q.open is not None or not sticky:
                fast.arm(q, topic, partition, sticky and self._sticky_known)
        if future.relative_offset == 0:  # it opened a batch: _yield_after_new_batch, written out
            if acc.opened_busy:
                busy = self._busy
                busy.count += 1
                if busy.count < self._busy_yield_every:
                    return ready(future)
            self._busy.count = 0
            return self._yield_with(future)
        return ready(future)

    def _yield_after_new_batch(self) -> bool:
        """Whether a record or set that just opened a batch yields to the loop: yes, so the
        sender ships what is ready, unless the partition's in-flight slots are all taken (the
        sender could ship nothing: the accumulator's ``opened_busy``, read as it opened the
        batch); then only every ``_BUSY_YIELD_EVERY``-th such batch, or sooner for big batches
        (``_BUSY_YIELD_BYTES``), so the answers that free the slots are read. One rule and
        counter for ``send()``'s two paths and ``send_batch()``."""
        acc = self._acc
        assert acc is not None
        if acc.opened_busy:
            busy = self._busy
            busy.count += 1
            if busy.count < self._busy_yield_every:
                return False
        self._busy.count = 0
        return True

    async def _yield_with(self, future: _F) -> _F:
        await asyncio.sleep(0)
        return future

    async def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """``send()``, every case: it waits (metadata, buffer space, the sender's turn in a
        starting transaction) and raises what is wrong with the record."""
        if not self._accepting:
            self._check_running()
        parts = self._partitions.get(topic)
        if parts is None:
            deadline: float | None = time.monotonic() + self.max_block_s
            parts = await self._wait_for_topic(topic, deadline)  # type: ignore[arg-type]
            self._check_running()
        else:
            deadline = None
        try:
            if key is None and headers is None:  # the common case: one length to add
                hdrs = b"\x00"
                size = (len(value) if value is not None else 0) + _PLAIN_RECORD_SIZE
            else:
                if key is not None and type(key) is not bytes:
                    key = _as_bytes(key)
                hdrs = encode_headers(headers) if headers else b"\x00"
                size = ((len(value) if value is not None else 0) + (len(key) if key is not None else 0)
                        + len(hdrs) + RECORD_OVERHEAD)
            if partition is None:
                sticky = key is None and self._sticky
                partition = self._partitioner.partition(topic, key, parts[0], parts[1])
            else:
                sticky = False
                if not 0 <= partition < len(parts[0]):
                    raise _no_such_partition(topic, partition, parts[0])
        except TypeError as exc:
            raise _bad_record(key, value, exc) from None
        txn = self._txn
        if txn is not None:
            txn.check_send(topic, partition)  # in a transaction; a new partition gets added
        if timestamp is None:
            timestamp = now_ms()
        if size > self._max_record_size:
            failed = ProduceResult(topic, partition, self._loop)  # type: ignore[arg-type]
            failed.set_failed(self._too_large(topic, partition, size, "record"))
            return RecordFuture(failed, 0, timestamp)
        pool = self._pool
        if size <= pool.available and not pool.waiters:
            pool.available -= size
        else:
            await self._reserve(size, deadline)
        acc = self._acc
        assert acc is not None
        try:
            future = acc.append(topic, partition, key, value, hdrs, timestamp, size, sticky)
            if future is None:  # the sticky partition's batch was full: it moved on
                partition = self._partitioner.partition(topic, key, parts[0], parts[1])
                if txn is not None:
                    txn.check_send(topic, partition)
                future = acc.append(topic, partition, key, value, hdrs, timestamp, size)
                assert future is not None
        except TypeError as exc:
            pool.release(size)
            raise _bad_record(key, value, exc) from None
        offset = future.relative_offset
        if offset == 0:
            if self._yield_after_new_batch():
                await asyncio.sleep(0)
        elif txn is not None and txn.starting_partitions and not offset % _STARTING_YIELD_EVERY:
            # the sender needs a few quick turns to start the transaction's pipeline
            # (pulllog.client.transactions)
            await asyncio.sleep(0)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """``send()`` and wait for the acknowledgement."""
        return await (await self.send(topic, value, key, headers, partition, timestamp))

    def send_batch(
        self,
        topic: str,
        records: Iterable[Any],
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> Awaitable[asyncio.Future[BatchMetadata]]:
        """Queue a message set for one partition; ``await`` it for one future of its BatchMetadata.

        ``records`` items are values (bytes or None) or tuples ``(key, value)``,
        ``(key, value, headers)`` or ``(key, value, headers, timestamp_ms)``. The set is
        appended contiguously in one RecordBatch (so it must fit ``max_request_size``).
        ``partition=None`` lets the partitioner choose as for a record without a key: keys
        in the set are stored but do not choose the partition (use ``send()`` for that).

        As ``send()``, it is awaited but is not a coroutine function: when nothing needs
        waiting (the topic known, buffer space free, no transaction) the call appends the
        set and returns ``records.encoding.ready(future)`` (or a coroutine that yields to the
        sender first, after a set that opened a batch); otherwise the coroutine that waits.
        Errors come out of the ``await`` either way.
        """
        # the common case without a coroutine (a frame, a send and a StopIteration per set);
        # anything unusual takes _send_batch before the partitioner is asked
        if not self._accepting or self._txn is not None:
            return self._send_batch(topic, records, partition=partition, timestamp=timestamp)
        parts = self._partitions.get(topic)
        items = records if isinstance(records, (list, tuple)) else list(records)
        if parts is None or not items:
            return self._send_batch(topic, items, partition=partition, timestamp=timestamp)
        size = -1
        if values_size is not None:  # estimate_set_size's common case, written out
            size = values_size(items)
            if size >= 0:
                size += RECORD_OVERHEAD * len(items)
        if size < 0:
            try:
                size = estimate_set_size(items)
            except (TypeError, IndexError):
                return self._send_batch(topic, items, partition=partition, timestamp=timestamp)
        pool = self._pool
        if size > self._max_record_size or size > pool.available or pool.waiters:
            return self._send_batch(topic, items, partition=partition, timestamp=timestamp)
        # from here on nothing goes back to _send_batch: a partitioner may count its calls
        sticky = self._sticky and partition is None
        if partition is None:
            partition = self._partitioner.partition(topic, None, parts[0], parts[1])
        elif not 0 <= partition < len(parts[0]):
            return _raise(_no_such_partition(topic, partition, parts[0]))
        if timestamp is None:
            timestamp = now_ms()
        future: asyncio.Future[BatchMetadata] = self._new_future()
        acc = self._acc
        assert acc is not None
        pool.available -= size  # pool.try_reserve(size), written out: it fits, nobody waits
        try:
            outcome = acc.append_set(topic, partition, items, timestamp, future, size, sticky)
            if outcome == REROUTE:
                partition = self._partitioner.partition(topic, None, parts[0], parts[1])
                outcome = acc.append_set(topic, partition, items, timestamp, future, size)
        except (TypeError, IndexError):
            pool.release(size)
            return _raise(TypeError("send_batch() records must be values (bytes or None) or tuples "
                                    "(key, value[, headers[, timestamp_ms]]) of bytes"))
        fast = self._fast
        if fast is not None and not sticky:
            # the C paths (send()'s and send_batch()'s SetPath) take this partition's next records
            fast.arm(acc.last, topic, partition, False)
        if outcome == NEW_BATCH and self._yield_after_new_batch():
            return self._yield_with(future)  # type: ignore[arg-type]
        return ready(future)

    async def _send_batch(
        self,
        topic: str,
        records: Iterable[Any],
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[BatchMetadata]:
        """``send_batch()``, every case: it waits (metadata, buffer space, the sender's turn in
        a starting transaction) and raises what is wrong with the set."""
        if not self._accepting:
            self._check_running()
        items = records if isinstance(records, (list, tuple)) else list(records)
        if not items:
            raise ValueError("send_batch() needs at least one record")
        deadline = None
        parts = self._partitions.get(topic)
        if parts is None:
            deadline = time.monotonic() + self.max_block_s
            parts = await self._wait_for_topic(topic, deadline)
            self._check_running()
        try:
            size = estimate_set_size(items)
        except (TypeError, IndexError):
            raise TypeError("send_batch() records must be values (bytes or None) or tuples "
                            "(key, value[, headers[, timestamp_ms]]) of bytes") from None
        sticky = self._sticky and partition is None
        if partition is None:
            partition = self._partitioner.partition(topic, None, parts[0], parts[1])
        elif not 0 <= partition < len(parts[0]):
            raise _no_such_partition(topic, partition, parts[0])
        if self._txn is not None:
            self._txn.check_send(topic, partition)
        if timestamp is None:
            timestamp = now_ms()
        future: asyncio.Future[BatchMetadata] = self._loop.create_future()  # type: ignore[union-attr]
        acc = self._acc
        assert acc is not None
        if size > self._max_record_size:
            future.set_exception(self._too_large(topic, partition, size, f"message set of {len(items)} records"))
            return future
        if not acc.pool.try_reserve(size):
            await self._reserve(size, deadline)
        try:
            outcome = acc.append_set(topic, partition, items, timestamp, future, size, sticky)
            if outcome == REROUTE:
                partition = self._partitioner.partition(topic, None, parts[0], parts[1])
                if self._txn is not None:
                    self._txn.check_send(topic, partition)
                outcome = acc.append_set(topic, partition, items, timestamp, future, size)
        except (TypeError, IndexError):
            acc.pool.release(size)
            raise TypeError("send_batch() records must be values (bytes or None) or tuples "
                            "(key, value[, headers[, timestamp_ms]]) of bytes") from None
        if self._txn is not None and self._txn.starting_partitions:
            await asyncio.sleep(0)
        elif outcome == NEW_BATCH and self._yield_after_new_batch():
            await asyncio.sleep(0)
        return future

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions (fetching metadata, and auto-creating it, if needed)."""
        self._check_running()
        parts = self._partitions.get(topic)
        if parts is None:
            parts = await self._wait_for_topic(topic, time.monotonic() + self.max_block_s)
        return list(parts[0])

    def _too_large(self, topic: str, partition: int, size: int, what: str) -> KafkaError:
        limit, name = min((self.max_request_size, "max_request_size"), (self.buffer_memory, "buffer_memory"))
        return KafkaError(ErrorCode.message_too_large,
                          f"MESSAGE_TOO_LARGE: the {what} for {topic}-{partition} is about {size} bytes, "
                          f"more than {name}={limit}; send less at once or raise {name}")

    async def _reserve(self, size: int, deadline: float | None) -> None:
        acc = self._acc
        assert acc is not None
        timeout = self.max_block_s if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await acc.pool.reserve(size, timeout)
        except TimeoutError:
            raise BufferExhaustedError(
                f"send() waited max_block_ms={round(self.max_block_s * 1000)} for buffer space: "
                f"{acc.pool.used} of buffer_memory={self.buffer_memory} bytes hold records the broker has "
                f"not acknowledged yet{self._why_stuck()}; raise buffer_memory or max_block_ms, or send slower"
            ) from None
        if self._state != _RUNNING:
            acc.pool.release(size)
            self._check_running()

    def _why_stuck(self) -> str:
        assert self._acc is not None
        errors = [b.last_error for b in self._acc.incomplete if b.last_error is not None]
        return f" (last error: {errors[-1]})" if errors else ""

    async def _wait_for_topic(self, topic: str, deadline: float) -> tuple[list[int], list[int]]:
        """Metadata for a topic send() has not seen, asking the broker to auto-create it."""
        last_error: BaseException | None = None
        while True:
            parts = self._partitions.get(topic)
            if parts is not None:
                return parts
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    async with self._topic_lock:  # concurrent sends to a new topic share one lookup
                        if topic not in self._partitions:
                            await self._cluster.refresh([topic], allow_auto_create=True)
                            self._update_partitions([topic])
            except TimeoutError:
                break
            except (BrokerUnreachableError, ConnectionError, OSError, KafkaError) as exc:
                last_error = exc
            if topic in self._partitions:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(self.retry_backoff_s or 0.05, remaining))
        waited = f"after max_block_ms={round(self.max_block_s * 1000)}"
        if isinstance(last_error, (BrokerUnreachableError, ConnectionError, OSError)):
            raise BrokerUnreachableError(f"no metadata for topic {topic!r} {waited}: {last_error}")
        error = UnknownTopicError(topic)
        error.args = (f"topic {topic!r} does not exist and the broker did not create it ({waited}; "
                      f"auto.create.topics.enable=false?); create it with `pulllog topic create {topic}`",)
        raise error

    def _update_partitions(self, topics: Iterable[str]) -> None:
        self._disarm()
        for topic in topics:
            info = self._cluster.topics.get(topic)
            if info is None or not info.partitions:
                continue
            everything = sorted(info.partitions)
            available = [p for p in everything if info.partitions[p].leader >= 0]
            self._partitions[topic] = (everything, available)

    def _batch_closed(self, topic: str, partition: int) -> None:
        # _disarm(), written out (once per batch: per record at batch_size=1): the sticky
        # partition may move, and the C send path found the open batch gone anyway
        fast = self._fast
        if fast is not None:
            fast.disarm()
        if self._sticky_known and self._partitioner.sticky.get(topic) != partition:  # type: ignore[attr-defined]
            return  # not the sticky partition's batch: the built-in partitioner would do nothing
        parts = self._partitions.get(topic)
        if parts is not None:
            self._partitioner.batch_closed(topic, partition, parts[0], parts[1])


def _raise_state_error(txn: TransactionManager, what: str) -> None:
    """Raise the transaction's own error (abortable or fatal), else a TransactionStateError."""
    if txn.has_error and isinstance(txn.last_error, KafkaError):
        error = txn.last_error
        raise type(error)(error.code, str(error))
    txn.require(what)  # raises: no state was allowed


def _no_such_partition(topic: str, partition: int, partitions: list[int]) -> KafkaError:
    return KafkaError(ErrorCode.unknown_topic_or_partition,
                      f"topic {topic!r} has partitions 0..{len(partitions) - 1}; partition {partition} does not exist")


async def _raise(exc: BaseException) -> Any:
    """An awaitable that raises ``exc``: send()'s errors come out of the ``await``, as from a coroutine."""
    raise exc


def _as_bytes(key: Any) -> bytes:
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(type(key).__name__)


def _bad_record(key: Any, value: Any, error: TypeError) -> TypeError:
    for name, item in (("key", key), ("value", value)):
        if item is not None and not isinstance(item, (bytes, bytearray, memoryview)):
            return TypeError(f"the record's {name} must be bytes or None, not {type(item).__name__}; "
                             f"encode it first, e.g. {name}.encode()")
    return TypeError(f"record headers must be (str, bytes or None) pairs: {error}")
