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

* **One sender task** per producer, created by ``start()`` and cancelled and joined by
  ``close()``. It owns a task group in which the Produce requests in flight and the
  metadata refreshes run, so nothing the producer starts outlives it.
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
  connection. ``send()`` yields to the event loop once per new batch, so the sender ships
  full batches while a tight loop keeps sending.
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
  batch. A retried batch is sent only once no earlier batch of its partition is in flight,
  and nothing newer of the partition is sent while a retry waits. Without idempotence a
  retried batch can land after batches that were in flight behind it (as in Kafka); with
  ``max_in_flight=1`` a partition has one batch in flight and order is strict. Errors
  that say metadata is stale also refresh it. A batch fails for good after ``retries``
  retries, on a non-retriable error (its future gets a ``KafkaError`` naming the code,
  e.g. MESSAGE_TOO_LARGE, with the broker's message), or ``delivery_timeout_ms`` after
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
  producer does.
* **Back-pressure.** ``buffer_memory`` bounds the bytes of records not yet acknowledged;
  a ``send()`` that does not fit waits, up to ``max_block_ms``, then raises
  ``BufferExhaustedError``. ``max_block_ms`` also bounds the wait for a new topic's
  metadata. Metadata is fetched with ``allow_auto_topic_creation`` as Kafka clients do.
* ``acks=0``: a batch is done when its request is written; its records report offset -1.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..records.compression import Compression
from .connection import BrokerUnreachableError, UnsupportedByBrokerError
from .accumulator import (
    NEW_BATCH,
    RECORD_OVERHEAD,
    REROUTE,
    ProducerBatch,
    RecordAccumulator,
    encode_headers,
    estimate_set_size,
)
from .cluster import DEFAULT_BOOTSTRAP, Cluster
from .record_future import ProduceResult, RecordFuture
from .errors import KafkaError, UnknownTopicError
from .partitioner import (
    Partitioner,
    PartitionerCallable,
    StickyPartitioner,
    make_partitioner,
)
from .types import RecordMetadata

__all__ = [
    "BatchMetadata",
    "BufferExhaustedError",
    "DeliveryTimeoutError",
    "Producer",
    "ProducerClosedError",
    "RecordFuture",
    "RecordMetadata",
]

log = logging.getLogger("pulllog.client.producer")

_time_ns = time.time_ns  # one global lookup per record instead of two

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)

# Errors after which the partition's leader (or the topic) should be looked up again.
_STALE_METADATA = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
})

_NEW, _RUNNING, _CLOSING, _CLOSED = "new", "running", "closing", "closed"


class BufferExhaustedError(TimeoutError):
    """send() waited ``max_block_ms`` for ``buffer_memory`` to free up."""


class DeliveryTimeoutError(TimeoutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` of being created."""


class ProducerClosedError(RuntimeError):
    """The producer is closed (or closing), or closed before a record could be sent."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a message set from ``send_batch()`` landed: ``count`` records from ``base_offset``."""

    topic: str
    partition: int
    base_offset: int  # -1 with acks=0
    count: int
    timestamp: int  # ms; the broker's time for LogAppendTime topics, else the set's

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1 if self.base_offset >= 0 else -1

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.count) if self.base_offset >= 0 else range(0)


# The broker remembers an idempotent producer's last 5 batches per partition
# (pulllog.log.producer_state): a retry is recognised only if it is among them.
MAX_IDEMPOTENT_IN_FLIGHT = 5


def _parse_acks(acks: int | str | None) -> int | None:
    if acks is None:
        return None
    value = -1 if isinstance(acks, str) and acks.strip().lower() == "all" else acks
    try:
        value = int(value)
    except (TypeError, ValueError):
        value = None  # type: ignore[assignment]
    if value not in (0, 1, -1):
        raise ValueError(f"acks={acks!r}: use 0 (no acknowledgement), 1 (the leader) or 'all' / -1")
    return value


def _idempotence(acks: int | str | None, enable_idempotence: bool | None, max_in_flight: int) -> tuple[int, bool]:
    """acks and idempotence by Kafka 3.0+'s rules: both default to on ("all"); idempotence left
    unset turns off by itself when acks is 0 or 1 or max_in_flight is above 5, and set to
    True it refuses them."""
    value = _parse_acks(acks)
    if enable_idempotence is None:
        return (-1, max_in_flight <= MAX_IDEMPOTENT_IN_FLIGHT) if value is None else (
            value, value == -1 and max_in_flight <= MAX_IDEMPOTENT_IN_FLIGHT)
    if enable_idempotence:
        if value not in (None, -1):
            raise ValueError(f"enable_idempotence=True needs acks='all', not acks={acks!r}; "
                             "drop acks (it defaults to 'all') or set enable_idempotence=False")
        if max_in_flight > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ValueError(f"enable_idempotence=True allows max_in_flight <= {MAX_IDEMPOTENT_IN_FLIGHT}, "
                             f"not {max_in_flight}: the broker recognises retries only among a producer's "
                             f"last {MAX_IDEMPOTENT_IN_FLIGHT} batches")
        return -1, True
    return (-1 if value is None else value), False


class Producer:
    """An asyncio Kafka producer; see the module docstring for how it batches and retries."""

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
    ) -> None:
        """
        acks: "all" / -1 (default: every in-sync replica), 1 (the leader) or 0 (no answer).
        compression: None, "gzip", "snappy", "lz4" or "zstd" (one block per batch).
        batch_size: target bytes of records per batch; a larger record gets its own batch.
            Keep it below the topics' max.message.bytes: a batch the broker refuses as
            MESSAGE_TOO_LARGE fails whole (Kafka's producer would split it; not done yet).
        linger_ms: how long an open batch waits for more records before it is sendable.
        buffer_memory: bytes of records not yet acknowledged before send() waits.
        max_block_ms: how long send() waits for buffer space or a new topic's metadata.
        max_request_size: the largest record, message set or Produce request sent.
        retries / retry_backoff_ms: resends of a batch after retriable errors, and the pause.
        delivery_timeout_ms: the most a record may wait from send() to its outcome.
        request_timeout_ms: how long a Produce request may wait for its answer.
        max_in_flight: Produce requests awaiting a response per broker connection, and batches
            per partition (Kafka's max.in.flight.requests.per.connection). With idempotence
            (at most 5) the log keeps the send order whatever fails. Without it (acks 0 or 1,
            or enable_idempotence=False) a batch that is retried may land after batches sent
            behind it, as in Kafka: set max_in_flight=1 for strict order without idempotence.
        partitioner: "sticky" (default), "round_robin", or fn(key, all, available) -> int.
        enable_idempotence: producer id, epoch and sequence numbers in every batch, so a retry
            is stored once and in order. None (default) as Kafka 3.0+: on, unless acks is 0
            or 1 or max_in_flight > 5; True with those is a ValueError.
        metadata_max_age_ms: refresh partition leaders at least this often while sending.
        """
        for name, value, lo in (("batch_size", batch_size, 0), ("buffer_memory", buffer_memory, 1),
                                ("max_block_ms", max_block_ms, 0), ("max_request_size", max_request_size, 1),
                                ("retries", retries, 0), ("retry_backoff_ms", retry_backoff_ms, 0),
                                ("delivery_timeout_ms", delivery_timeout_ms, 1),
                                ("request_timeout_ms", request_timeout_ms, 1), ("max_in_flight", max_in_flight, 1),
                                ("metadata_max_age_ms", metadata_max_age_ms, 0)):
            if not isinstance(value, int) or value < lo:
                raise ValueError(f"{name}={value!r}: must be a whole number >= {lo}")
        if linger_ms < 0:
            raise ValueError(f"linger_ms={linger_ms!r}: must be >= 0")
        self.client_id = client_id
        self.acks, enable_idempotence = _idempotence(acks, enable_idempotence, max_in_flight)
        self.compression = Compression.parse(compression)
        # a batch must fit a request: header and request framing take the rest
        self.batch_size = max(1, min(batch_size, max_request_size - 256))
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.max_request_size = max_request_size
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.enable_idempotence = enable_idempotence
        # batches in flight per partition: with idempotence within the broker's window of 5
        self._partition_in_flight = min(max_in_flight, MAX_IDEMPOTENT_IN_FLIGHT) if enable_idempotence else max_in_flight
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self._partitioner = make_partitioner(partitioner)
        self._sticky = isinstance(self._partitioner, StickyPartitioner)
        self._cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                metadata_max_age_ms=metadata_max_age_ms)
        self._state = _NEW
        self._accepting = False  # running, and the sender is healthy: send() may queue
        self._max_record_size = min(max_request_size, buffer_memory)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._acc: RecordAccumulator | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._sender_error: BaseException | None = None
        # topic -> (all partitions, partitions with a leader), what send() partitions by
        self._partitions: dict[str, tuple[list[int], list[int]]] = {}
        self._topic_lock = asyncio.Lock()
        self._metadata_wanted: set[str] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_retry_at = 0.0
        self._last_metadata = 0.0
        self._in_flight_by_node: dict[int, int] = {}
        # KIP-360: a sealed batch failed for good, so its sequence numbers are a gap every later
        # batch would be refused for; once nothing is in flight the producer takes a new epoch
        self._epoch_bump_needed = False
        self._epoch_bump_task: asyncio.Task[None] | None = None
        self.producer_id = -1
        self.producer_epoch = -1

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
        try:
            await self._cluster.refresh([])
            self._last_metadata = time.monotonic()
            if self.enable_idempotence:
                await self._init_producer_id()
        except BaseException:
            await self._cluster.close()
            self._state = _CLOSED
            raise
        self._pool = self._acc.pool
        self._state = _RUNNING
        self._accepting = True
        self._sender_task = self._loop.create_task(self._run_sender(), name=f"pulllog-producer-sender[{self.client_id}]")

    async def _init_producer_id(self) -> None:
        conn = await self._cluster.any_connection()
        version = conn.version("init_producer_id", 0, 4)
        data = {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
        async with asyncio.timeout(self.request_timeout_ms / 1000):
            resp = await conn.request("init_producer_id", version, data)
        if resp.error_code != ErrorCode.none:
            raise KafkaError(resp.error_code, f"{resp.error_code.name.upper()}: InitProducerId failed, "
                             "so enable_idempotence=True cannot work with this broker")
        self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)

    async def flush(self, timeout: float | None = None) -> None:
        """Send every record queued so far, now (ignoring linger_ms), and wait for the outcomes.

        Outcomes, not successes: records that fail are reported through their futures.
        """
        if self._acc is None:
            return
        pending = [batch.done for batch in self._acc.incomplete]
        if not pending:
            return
        self._acc.flushing += 1
        self._wakeup.set()
        try:
            await asyncio.wait(pending, timeout=timeout)
        finally:
            self._acc.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds, else until every record has an outcome), then stop.

        Records still unsent when the timeout passes fail with ProducerClosedError.
        """
        if self._state in (_CLOSING, _CLOSED):
            return
        was_running = self._state == _RUNNING
        self._state = _CLOSING
        self._accepting = False
        try:
            if was_running and self._sender_error is None:
                await self.flush(timeout)
        finally:
            # Cancelling close() (or an anyio scope around it) cuts the flush short, but the
            # sender and the connections are still stopped and joined before it returns.
            task, self._sender_task = self._sender_task, None
            cancelled = False
            if task is not None:
                task.cancel()
                cancelled = await _join_despite_cancellation(task)
            self._state = _CLOSED
            if self._acc is not None:
                self._abort_incomplete(ProducerClosedError("the producer was closed before the record was sent"))
            closing = asyncio.get_running_loop().create_task(self._cluster.close(), name="pulllog-producer-close")
            cancelled = await _join_despite_cancellation(closing) or cancelled
            if not closing.cancelled() and closing.exception() is not None:
                log.debug("closing the producer's connections failed: %r", closing.exception())
            if cancelled:
                raise asyncio.CancelledError()

    @property
    def sender_task(self) -> asyncio.Task[None] | None:
        """The task that sends batches (None before start and after close)."""
        return self._sender_task

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

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """Queue one record; return a future of its RecordMetadata.

        Waits only for buffer space (``max_block_ms``) or, for a topic not seen yet, its
        metadata. ``headers`` are (str, bytes or None) pairs or a mapping; ``timestamp`` is
        ms since the epoch (default: now). The future fails with a ``KafkaError`` naming the
        broker's error code, ``DeliveryTimeoutError`` or ``ProducerClosedError``. It is a
        ``RecordFuture``, which asyncio treats as a future (await, gather, wait, wait_for,
        add_done_callback); cancelling it detaches only it: the record is still sent.
        """
        # The hot path of per-record sending: keep it free of calls that are not needed.
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
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
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
                future = acc.append(topic, partition, key, value, hdrs, timestamp, size)
                assert future is not None
        except TypeError as exc:
            pool.release(size)
            raise _bad_record(key, value, exc) from None
        if future.relative_offset == 0:  # it opened a batch
            await asyncio.sleep(0)  # let the sender ship what is ready before we fill more
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

    async def send_batch(
        self,
        topic: str,
        records: Iterable[Any],
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[BatchMetadata]:
        """Queue a message set for one partition; return one future of its BatchMetadata.

        ``records`` items are values (bytes or None) or tuples ``(key, value)``,
        ``(key, value, headers)`` or ``(key, value, headers, timestamp_ms)``. The set is
        appended contiguously in one RecordBatch (so it must fit ``max_request_size``).
        ``partition=None`` lets the partitioner choose as for a record without a key: keys
        in the set are stored but do not choose the partition (use ``send()`` for that).
        """
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
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
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
                outcome = acc.append_set(topic, partition, items, timestamp, future, size)
        except (TypeError, IndexError):
            acc.pool.release(size)
            raise TypeError("send_batch() records must be values (bytes or None) or tuples "
                            "(key, value[, headers[, timestamp_ms]]) of bytes") from None
        if outcome == NEW_BATCH:
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
        for topic in topics:
            info = self._cluster.topics.get(topic)
            if info is None or not info.partitions:
                continue
            everything = sorted(info.partitions)
            available = [p for p in everything if info.partitions[p].leader >= 0]
            self._partitions[topic] = (everything, available)

    def _batch_closed(self, topic: str, partition: int) -> None:
        parts = self._partitions.get(topic)
        if parts is not None:
            self._partitioner.batch_closed(topic, partition, parts[0], parts[1])

    # ------------------------------------------------------------------ the sender

    async def _run_sender(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    self._wakeup.clear()
                    delay = self._sender_pass(tg)
                    if delay is not None and delay <= 0:
                        await asyncio.sleep(0)
                        continue
                    try:
                        async with asyncio.timeout(delay):
                            await self._wakeup.wait()
                    except TimeoutError:
                        pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: fail what is pending rather than hang it forever
            log.exception("the producer's sender task failed")
            self._sender_error = exc
            self._accepting = False
            self._abort_incomplete(ProducerClosedError(f"the producer's sender failed: {exc!r}"))

    def _sender_pass(self, tg: asyncio.TaskGroup) -> float | None:
        """Expire, drain and send what is ready; return seconds until the next timed event."""
        acc = self._acc
        assert acc is not None
        now = time.monotonic()
        wake_in: float | None = None
        if self._partitions and now - self._last_metadata >= self.metadata_max_age_s:
            self._metadata_wanted.update(self._partitions)
        flushing = acc.flushing > 0 or self._state == _CLOSING
        linger = self.linger_s
        timeout = self.delivery_timeout_s
        topics = self._cluster.topics
        partition_limit = self._partition_in_flight
        idempotent = self.enable_idempotence
        if self._epoch_bump_needed:
            # send nothing under the old epoch; bump it once every answer is in (their wake-up)
            if self._epoch_bump_task is None and not any(self._in_flight_by_node.values()):
                self._epoch_bump_task = tg.create_task(self._bump_epoch(), name="pulllog-producer-epoch-bump")
            return None
        requests: dict[int, list[ProducerBatch]] = {}
        request_bytes: dict[int, int] = {}
        for q in list(acc.queues.values()):
            flying = len(q.in_flight)
            if flying >= partition_limit:
                continue  # its answers wake us
            if q.ready:
                batch = q.ready[0]
                while batch.created + timeout <= now:
                    q.ready.popleft()
                    self._expire(batch, now)
                    if not q.ready:
                        break
                    batch = q.ready[0]
                if not q.ready:
                    continue
                if batch.retry_at > now:
                    wake_in = _sooner(wake_in, batch.retry_at - now)
                    continue
                if idempotent and batch.attempts and flying and q.in_flight[0].order < batch.order:
                    # a retry goes only once everything before it is answered (Kafka does the
                    # same): an earlier batch that fails too must be resent first
                    continue
            elif q.open is not None and q.open.count:
                batch = q.open
                if batch.created + timeout <= now:
                    q.open = None
                    self._expire(batch, now)
                    continue
                age = now - batch.created
                if age < linger and not flushing:
                    wake_in = _sooner(wake_in, linger - age)
                    continue
                if flying and not linger and not flushing:
                    # linger_ms=0: an open batch goes at once only if the partition has nothing
                    # in flight; otherwise it fills until an answer (or it is full), so batches
                    # still form under load. Full batches do not wait: they pipeline.
                    continue
            else:
                continue
            wake_in = _sooner(wake_in, batch.created + timeout - now)
            info = topics.get(q.topic)
            pinfo = info.partitions.get(q.partition) if info is not None else None
            if pinfo is None or pinfo.leader < 0:
                self._metadata_wanted.add(q.topic)
                continue
            node = pinfo.leader
            if self._in_flight_by_node.get(node, 0) >= self.max_in_flight:
                continue  # a response from that broker wakes us
            size = batch.size
            if node in request_bytes and request_bytes[node] + size > self.max_request_size:
                wake_in = 0.0  # the next request can take it right away
                continue
            if q.open is batch:
                acc.close(q)
            acc.sent(q, batch)
            if batch.wire is None:
                self._seal(batch, q)
            requests.setdefault(node, []).append(batch)
            request_bytes[node] = request_bytes.get(node, 0) + len(batch.wire)  # type: ignore[arg-type]
            if flying + 1 < partition_limit and q.ready:
                wake_in = 0.0  # one batch per partition per request: the next goes in the next one
        for node, batches in requests.items():
            self._in_flight_by_node[node] = self._in_flight_by_node.get(node, 0) + 1
            tg.create_task(self._produce(node, batches), name=f"pulllog-producer-request[{node}]")
        if self._metadata_wanted and self._metadata_task is None:
            if now >= self._metadata_retry_at:
                self._metadata_task = tg.create_task(self._refresh_metadata(), name="pulllog-producer-metadata")
            else:
                wake_in = _sooner(wake_in, self._metadata_retry_at - now)
        return wake_in

    def _seal(self, batch: ProducerBatch, q: Any) -> None:
        if self.enable_idempotence:
            sequence = q.next_sequence
            q.next_sequence = (sequence + batch.count) % 2**31
            batch.seal(self.compression, self.producer_id, self.producer_epoch, sequence)
        else:
            batch.seal(self.compression, -1, -1, -1)

    async def _bump_epoch(self) -> None:
        """KIP-360, as Kafka's producer: the same producer id with the next epoch (InitProducerId
        v3+ with the current id and epoch), under which every partition starts again at
        sequence 0; batches sealed under the old epoch that wait for a retry are restamped, in
        order. Records stay in send order; only the failed batch is missing."""
        acc = self._acc
        assert acc is not None
        try:
            conn = await self._cluster.any_connection()
            version = conn.version("init_producer_id", 3, 4)
            data = {"transactional_id": None, "transaction_timeout": 60_000,
                    "producer_id": self.producer_id, "producer_epoch": self.producer_epoch}
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                resp = await conn.request("init_producer_id", version, data)
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, f"{resp.error_code.name.upper()}: InitProducerId failed")
            old = (self.producer_id, self.producer_epoch)
            self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
            for q in acc.queues.values():
                q.next_sequence = 0
                for batch in q.ready:  # retries first, in send order; unsealed ones get theirs when sent
                    if batch.wire is not None:
                        batch.restamp(self.producer_id, self.producer_epoch, q.next_sequence)
                        q.next_sequence = (q.next_sequence + batch.count) % 2**31
            self._epoch_bump_needed = False
            log.info("producer %d epoch %d -> producer %d epoch %d after a batch failed for good",
                     *old, self.producer_id, self.producer_epoch)
        except UnsupportedByBrokerError as exc:
            # an old broker: go on under this epoch (later batches of the failed batch's
            # partition are refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and say so)
            log.warning("cannot take a new producer epoch (%s); records after a failed batch may fail too", exc)
            self._epoch_bump_needed = False
        except (BrokerUnreachableError, ConnectionError, OSError, TimeoutError, KafkaError) as exc:
            log.info("taking a new producer epoch failed (%s); retrying", exc)
            await asyncio.sleep(max(self.retry_backoff_s, 0.01))
        finally:
            self._epoch_bump_task = None
            self._wakeup.set()

    async def _refresh_metadata(self) -> None:
        topics = sorted(self._metadata_wanted | set(self._partitions))
        self._metadata_wanted.clear()
        try:
            await self._cluster.refresh(topics, allow_auto_create=True)
            self._update_partitions(topics)
            self._last_metadata = time.monotonic()
        except (BrokerUnreachableError, ConnectionError, OSError, TimeoutError, KafkaError) as exc:
            log.debug("metadata refresh for %s failed: %s", topics, exc)
            self._metadata_wanted.update(topics)
            self._metadata_retry_at = time.monotonic() + max(self.retry_backoff_s, 0.01)
        finally:
            self._metadata_task = None
            self._wakeup.set()

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        """One Produce request to one broker, and what its answer means for each batch."""
        conn = None
        try:
            try:
                async with asyncio.timeout(self.request_timeout_ms / 1000):
                    conn = await self._cluster.connection(node)
                    version = conn.version("produce", 3, 9)
                    by_topic: dict[str, list[dict[str, Any]]] = {}
                    for batch in batches:
                        by_topic.setdefault(batch.topic, []).append({"index": batch.partition, "records": batch.wire})
                    data = {"transactional_id": None, "acks": self.acks, "timeout": self.request_timeout_ms,
                            "topic_data": [{"name": t, "partition_data": p} for t, p in by_topic.items()]}
                    if self.acks == 0:
                        await conn.request("produce", version, data, expect_response=False)
                        response = None
                    else:
                        response = await conn.request("produce", version, data)
            except asyncio.CancelledError:
                for batch in batches:
                    self._fail(batch, ProducerClosedError("the producer was closed while the record was in flight"))
                raise
            except TimeoutError:
                where = conn.address if conn is not None else f"broker {node}"
                error: BaseException = TimeoutError(
                    f"no answer from {where} within request_timeout_ms={self.request_timeout_ms}")
                if conn is not None:
                    await conn.close()  # its later answers would be stale; reconnect
                self._retry_or_fail(batches, error, retriable=True, stale=True)
                return
            except (ConnectionError, OSError) as exc:  # includes BrokerUnreachable, ConnectionClosed
                self._retry_or_fail(batches, exc, retriable=True, stale=True)
                return
            except UnsupportedByBrokerError as exc:
                self._retry_or_fail(batches, exc, retriable=False)
                return
            except Exception as exc:
                log.exception("Produce request to broker %d failed", node)
                self._retry_or_fail(batches, exc, retriable=False)
                return
            if response is None:
                for batch in batches:
                    self._complete(batch, -1, -1)
                return
            results = {(t.name, int(p.index)): p for t in response.responses for p in t.partition_responses}
            for batch in batches:
                result = results.get((batch.topic, batch.partition))
                if result is None:
                    self._retry_or_fail([batch], KafkaError(
                        ErrorCode.unknown_server_error,
                        f"UNKNOWN_SERVER_ERROR: the broker's Produce response left out {batch.topic}-{batch.partition}"),
                        retriable=False)
                elif result.error_code == ErrorCode.none:
                    self._complete(batch, int(result.base_offset), _ms(result.log_append_time))
                elif result.error_code == ErrorCode.duplicate_sequence_number:
                    self._complete(batch, -1, -1)  # already appended by an earlier attempt
                elif result.error_code == ErrorCode.out_of_order_sequence_number:
                    self._out_of_order(batch, result)
                else:
                    error = _produce_error(batch, result)
                    self._retry_or_fail([batch], error, retriable=error.retriable,
                                        stale=result.error_code in _STALE_METADATA)
        finally:
            self._in_flight_by_node[node] -= 1
            self._wakeup.set()

    def _out_of_order(self, batch: ProducerBatch, result: Any) -> None:
        """OUT_OF_ORDER_SEQUENCE_NUMBER: expected while an earlier batch of the partition is
        unacknowledged (it failed, or is in flight and may fail: the broker refused this one
        because that one is missing), so resend this one after it. Otherwise the broker lost
        the sequence (an earlier batch failed for good, or the log was truncated): fail."""
        assert self._acc is not None
        q = self._acc.queue(batch.topic, batch.partition)
        error = _produce_error(batch, result)
        if q.unacknowledged_before(batch) or self._epoch_bump_needed:
            self._retry_or_fail([batch], error, retriable=True)
            return
        self._retry_or_fail([batch], KafkaError(error.code, (
            f"{error}; no earlier batch of this partition is pending, so the broker's sequence no longer "
            "matches this producer's (an earlier batch failed for good, or the log was truncated): later "
            "records of this partition may fail too; close the producer and create a new one")), retriable=False)

    def _retry_or_fail(self, batches: list[ProducerBatch], error: BaseException, *, retriable: bool,
                       stale: bool = False) -> None:
        acc = self._acc
        assert acc is not None
        now = time.monotonic()
        for batch in batches:
            if batch.done.done():
                continue  # failed meanwhile (closed)
            batch.last_error = error
            if stale:
                self._cluster.invalidate(batch.topic)
                self._metadata_wanted.add(batch.topic)
            if (retriable and batch.attempts < self.retries and self._state != _CLOSED
                    and now + self.retry_backoff_s < batch.created + self.delivery_timeout_s):
                log.debug("retrying %r after %s", batch, error)
                acc.retry_later(batch, now + self.retry_backoff_s)
            elif retriable and now + self.retry_backoff_s >= batch.created + self.delivery_timeout_s:
                self._expire(batch, now)
            else:
                self._fail(batch, error)

    def _expire(self, batch: ProducerBatch, now: float) -> None:
        last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
        self._fail(batch, DeliveryTimeoutError(
            f"{batch.count} record(s) for {batch.topic}-{batch.partition} not acknowledged within "
            f"delivery_timeout_ms={round(self.delivery_timeout_s * 1000)}{last}"))

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        assert self._acc is not None
        if batch.done.done():
            return  # failed meanwhile (closed): its outcome is told already
        self._acc.finish(batch)
        batch.result.set_acknowledged(base_offset, log_append_time)  # every record's future at once
        topic, partition = batch.topic, batch.partition
        for first, count, ts, future in batch.set_futures:
            if not future.done():
                future.set_result(BatchMetadata(topic, partition, base_offset + first if base_offset >= 0 else -1,
                                                count, ts if log_append_time < 0 else log_append_time))

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        assert self._acc is not None
        if batch.done.done():
            return
        if self.enable_idempotence and batch.wire is not None and self._state != _CLOSED:
            self._epoch_bump_needed = True  # its sequence numbers will never be written
        self._acc.finish(batch)
        batch.result.set_failed(error)
        for _first, _count, _ts, future in batch.set_futures:
            if not future.done():
                future.set_exception(error)

    def _abort_incomplete(self, error: BaseException) -> None:
        assert self._acc is not None
        for q in self._acc.queues.values():
            q.open = None
            q.ready.clear()
        for batch in list(self._acc.incomplete):
            self._fail(batch, error)


async def _join_despite_cancellation(task: asyncio.Task[Any]) -> bool:
    """Wait until ``task`` is done even if we are cancelled meanwhile; say whether we were."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def _sooner(current: float | None, candidate: float) -> float:
    return candidate if current is None or candidate < current else current


def _ms(value: datetime.datetime | None) -> int:
    if value is None:
        return -1
    return (value - _EPOCH) // _MS


def _produce_error(batch: ProducerBatch, result: Any) -> KafkaError:
    code = ErrorCode(int(result.error_code))
    text = f"{code.name.upper()} producing {batch.count} record(s) to {batch.topic}-{batch.partition}"
    if result.error_message:
        text += f": {result.error_message}"
    # INVALID_RECORD names the bad records; add any the summary message does not mention
    record_errors = [f"record {int(e.batch_index)}: {e.batch_index_error_message}"
                     for e in (result.record_errors or ())
                     if e.batch_index_error_message and e.batch_index_error_message not in text]
    if record_errors:
        text += " (" + "; ".join(record_errors) + ")"
    if code == ErrorCode.message_too_large:
        text += " (the topic's max.message.bytes is smaller than the batch: send smaller records or raise it)"
    return KafkaError(code, text)


def _no_such_partition(topic: str, partition: int, partitions: list[int]) -> KafkaError:
    return KafkaError(ErrorCode.unknown_topic_or_partition,
                      f"topic {topic!r} has partitions 0..{len(partitions) - 1}; partition {partition} does not exist")


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
