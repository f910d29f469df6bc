"""The producer's sender: drains ready batches into Produce requests and handles the answers.

``Sender.run()`` is the loop of Kafka's Sender thread, as one asyncio coroutine that the
producer's supervisor task runs (``pulllog.client.producer``). Each pass:

1. expires batches older than ``delivery_timeout_ms``;
2. picks, per partition, the next batch to send (the accumulator's oldest ready batch, or
   its open batch once ``linger_ms`` passed, at a flush, or at once with ``linger_ms=0``
   when nothing of the partition is in flight), within ``max_in_flight`` batches per
   partition and requests per broker, and what the idempotence manager allows;
3. groups them per leader into Produce requests (one batch per partition in a request, up to
   ``max_request_size``: a partition with several batches to send and free slots has its
   k-th one in its leader's k-th request of the pass), seals each batch on its first send
   and starts the requests, in drain order;
4. starts a metadata refresh or an epoch bump (InitProducerId) when one is due;
5. sleeps until woken (a new or closed batch, an answer, a flush) or the next timed event.

**Requests.** A Produce request is no task: the pass encodes it (``ProduceRequestEncoder``:
the header once per connection, a one-partition request in one pack and one join), writes it
with ``KafkaConnection.send`` and goes on; the connection's reader calls the request back
with the response frame (or the error that closed the connection), which is decoded by hand
and completes, retries or fails its batches right there, without a task, a future or a loop
hop per request. A batch-1 producer makes one request per record, so each of those had cost
more than the record. When a read has brought answers (``KafkaConnection.after_frames``), the
sender passes at once, in that same turn, and writes the requests for the slots they freed
before it completes the batches they acknowledged: the broker has the next requests while the
client finishes the last ones (with five in flight, client and broker otherwise take strict
turns, and the sender's loop took a turn more to write). A partition's outcomes are still
told in the order of its batches: any other outcome (a batch of a request with more
partitions, completed at once; a failure, an expiry by that pass) first completes the
acknowledged batches held back so far (``_tell_acked``). Requests wait in ``_requests``, oldest first: one unanswered after
``request_timeout_ms`` closes its connection and is retried (every pass checks the oldest),
and leaving ``run()`` fails the requests in flight with ``ProducerClosedError``. Metadata
refreshes, connecting and epoch bumps run as tasks of the sender's own ``asyncio.TaskGroup``:
leaving ``run()`` (the supervisor cancelled) cancels and joins them.

**In flight.** The sender owns the batches in flight: per partition, oldest first (by
``ProducerBatch.order``). The accumulator (``pulllog.client.accumulator``) owns the open and
ready batches, and the sender moves batches between the two only through its methods
(``next_ready``, ``open_batch``, ``drain``, ``reenqueue``, ``deallocate``). A batch's answer
then completes it, puts it back in order for a retry, or fails it (the producer module's
docstring has the retry rules, ``pulllog.client.idempotence`` the sequence rules).

**Connections.** A batch is drained only for a leader with an open connection, and its
request is written on that connection in drain order; connecting is a task of its own
(one per broker, ``retry_backoff_ms`` after a failure), and a request never connects for
itself. Otherwise a batch whose connection attempt failed late could reach the broker after
a later batch that connected meanwhile, and a broker with no state for this producer takes
any sequence (KIP-360): it would store the later batch first and refuse the earlier one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ..net.guard import MalformedError
from ..records.encoding import SlotsMaker
from ..net.produce import PartitionProduceResponse, ProduceRequestEncoder, decode_produce_response
from ..net.protocol import InvalidResponseError
from .accumulator import ProducerBatch, RecordAccumulator
from .cluster import Cluster
from .connection import BrokerUnreachableError, ConnectionClosedError, KafkaConnection, UnsupportedByBrokerError
from .errors import KafkaError
from .idempotence import IdempotenceManager
from .producer_config import ProducerConfig
from .record_future import BatchMetadata, DeliveryTimeoutError, ProducerClosedError
from .transactions import Outcome, TransactionManager
from .txn_coordinator import TxnCoordinatorClient

__all__ = ["Sender"]

log = logging.getLogger("pulllog.client.producer")

# Passes the sender makes in one turn of the event loop while each leaves more to send
# (normally max_in_flight at most: every pass fills one more request per broker)
_PASSES_PER_TURN = 16

# Errors after which the partition's leader (or the topic) should be looked up again.
_STALE_METADATA = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
})

_FAILURES = (BrokerUnreachableError, ConnectionError, OSError, TimeoutError, KafkaError)


class _Stopped(Exception):
    """Leaves the sender's task group, which then cancels and joins its requests."""


class Sender:
    """Sends one producer's batches; see the module docstring."""

    def __init__(self, config: ProducerConfig, cluster: Cluster, accumulator: RecordAccumulator,
                 idempotence: IdempotenceManager, wakeup: asyncio.Event, *,
                 topics: Mapping[str, Any], on_metadata: Callable[[list[str]], None],
                 on_failure: Callable[[BaseException], None]) -> None:
        self.config = config
        self._cluster = cluster
        self._acc = accumulator
        self._idempotence = idempotence
        self._wakeup = wakeup
        self._topics = topics  # the topics send() partitions for (the producer's; read here)
        self._on_metadata = on_metadata  # fresh metadata arrived for these topics
        self._on_failure = on_failure  # the sender failed (a bug): the producer stops accepting
        self.closing = False  # close() is flushing: open batches are sendable at once
        self.closed = False  # nothing more is sent or retried
        self._stopping = False
        self.error: BaseException | None = None
        # (topic, partition) -> its batches in flight, oldest first (by order)
        self._in_flight: dict[tuple[str, int], list[ProducerBatch]] = {}
        self._in_flight_by_node: dict[int, int] = {}  # Produce requests awaiting an answer
        self._metadata_wanted: set[str] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_retry_at = 0.0
        self.last_metadata = time.monotonic()
        self._epoch_bump_task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # sets the wake-up event (_wake_within)
        self._timer_when = 0.0  # when it fires, on the loop's clock
        # node -> its connect task; a node whose last attempt failed: when to try again, and why
        self._connecting: dict[int, asyncio.Task[None]] = {}
        self._connect_retry_at: dict[int, float] = {}
        self._connect_errors: dict[int, BaseException] = {}
        # Produce requests awaiting an answer, oldest first (a dict as an ordered set)
        self._requests: dict[_Request, None] = {}
        self._encoders: dict[int, tuple[KafkaConnection, ProduceRequestEncoder]] = {}  # node -> for its connection
        self._callback_error: BaseException | None = None  # a bug in handling an answer (_Request)
        self._held: list[KafkaConnection] = []  # connections with requests to write at the turn's end
        self._tg: asyncio.TaskGroup | None = None  # run()'s, while it runs (_after_answers passes in it)
        # run()'s loop (asyncio.get_running_loop() asks the OS for the process id on every call
        # in Python 3.11: a system call per wake-up timer)
        self._loop: asyncio.AbstractEventLoop | None = None
        # batches acknowledged by the answers of the read being handled, completed by
        # _after_answers once it wrote the requests for the slots they freed: (batch, (base
        # offset, log append time)), the pair as one_partition_ack gave it
        self._acked: list[tuple[ProducerBatch, tuple[int, int]]] = []
        self._answers_read = False  # a read brought answers: _after_answers has a pass to make
        # a transactional producer: its coordinator's requests, and the AddPartitionsToTxn running
        self.txn_coordinator: TxnCoordinatorClient | None = None
        self._transactional_id: str | None = getattr(idempotence, "transactional_id", None)
        self._add_partitions_task: asyncio.Task[None] | None = None
        # what every pass reads, in seconds, computed once
        self._linger_s = config.linger_s
        self._delivery_timeout_s = config.delivery_timeout_s
        self._metadata_max_age_s = config.metadata_max_age_s
        self._partition_limit = config.partition_in_flight
        self._request_timeout_s = config.request_timeout_s

    def wake(self) -> None:
        self._wakeup.set()

    # ------------------------------------------------------------------ the loop

    def stop(self) -> None:
        """Leave ``run()`` soon: requests in flight are cancelled (their batches fail)."""
        self._stopping = True
        self._wakeup.set()

    async def run(self) -> None:
        """Send until ``stop()``; a bug fails every pending record rather than hang it."""
        try:
            try:
                async with asyncio.TaskGroup() as tg:
                    self._tg = tg
                    self._loop = asyncio.get_running_loop()
                    while not self._stopping:
                        if self._callback_error is not None:
                            raise self._callback_error
                        self._wakeup.clear()
                        delay = self._turn(tg)
                        if delay is not None and delay <= 0:
                            await asyncio.sleep(0)
                            continue
                        if delay is not None:
                            self._wake_within(delay)
                        await self._wakeup.wait()
                    raise _Stopped  # the task group cancels and joins every request
            except* _Stopped:
                pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: fail what is pending rather than hang it forever
            log.exception("the producer's sender task failed")
            self.error = exc
            self._on_failure(exc)
            self.abort(ProducerClosedError(f"the producer's sender failed: {exc!r}"))
        finally:
            self._tg = None
            if self._timer is not None:
                self._timer.cancel()
            self._fail_requests(ProducerClosedError("the producer was closed while the record was in flight"))

    def _wake_within(self, delay: float) -> None:
        """Have the wake-up event set within ``delay`` seconds. One timer serves many waits:
        it is moved only for an earlier deadline (a pass woken early just computes the next
        one), since a fresh timeout per wait cost more than the pass of a one-record request."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        when = now + delay
        timer = self._timer
        if timer is not None:
            if now < self._timer_when <= when:  # (the timer's when(), kept: one call less per pass)
                return
            timer.cancel()
        self._timer = loop.call_at(when, self._wakeup.set)
        self._timer_when = when

    def _pass(self, tg: asyncio.TaskGroup) -> float | None:
        """Expire, drain and send what is ready; return seconds until the next timed event."""
        acc = self._acc
        config = self.config
        now = time.monotonic()
        # requests unanswered too long first: an epoch bump waits for every answer
        wake_in: float | None = self._expire_requests(now) if self._requests else None
        if self._topics and now - self.last_metadata >= self._metadata_max_age_s:
            self._metadata_wanted.update(self._topics)
        flushing = acc.flushing > 0 or self.closing
        linger = self._linger_s
        timeout = self._delivery_timeout_s
        topics = self._cluster.topics
        partition_limit = self._partition_limit
        idempotence = self._idempotence
        txn = idempotence if idempotence.transactional else None
        if txn is not None and self._txn_pass(tg):
            return wake_in  # the transaction failed or is aborting: nothing more is sent
        if not idempotence.may_send():
            # send nothing under the old epoch; bump it once every answer is in (their wake-up)
            if self._epoch_bump_task is None and not any(self._in_flight_by_node.values()):
                self._epoch_bump_task = tg.create_task(self._bump_epoch(), name="pulllog-producer-epoch-bump")
            return wake_in
        in_flight = self._in_flight
        expire = self._expire_now
        # node -> its requests of this pass, each a list of batches (one per partition) and
        # its bytes; a partition's k-th batch of the pass goes in its leader's k-th request
        requests: dict[int, list[list[ProducerBatch]]] = {}
        request_bytes: dict[int, list[int]] = {}
        connections: dict[int, KafkaConnection] = {}
        connected = self._cluster.connected
        max_in_flight = config.max_in_flight
        for q in acc.partitions():
            k = 0  # this partition's batches taken in this pass so far
            while True:  # as many batches of the partition as it has free slots (break: next partition)
                flying_batches = in_flight.get(q.key)
                flying = len(flying_batches) if flying_batches else 0
                if flying >= partition_limit:
                    break  # its answers wake us
                if txn is not None and (not txn.may_produce_to(q.key)  # type: ignore[attr-defined]
                                        or flying and txn.sends_alone(q.key)):  # type: ignore[attr-defined]
                    # AddPartitionsToTxn first (_txn_pass started it; its end wakes us), then the
                    # partition's first batch of the epoch alone (pulllog.client.transactions)
                    break
                batch = acc.next_ready(q, now, timeout, expire)
                if batch is not None:
                    if batch.retry_at > now:
                        wake_in = _sooner(wake_in, batch.retry_at - now)
                        break
                else:
                    batch = acc.open_batch(q)
                    if batch is None:
                        break
                    if batch.created + timeout <= now:
                        acc.expire_open(q)
                        self._expire(batch, now)
                        break
                    age = now - batch.created
                    if age < linger and not flushing:
                        wake_in = _sooner(wake_in, linger - age)
                        break
                    if flying and not linger and not flushing:
                        # linger_ms=0: an open batch goes at once only if the partition has nothing
                        # in flight; otherwise it fills until an answer (or it is full), so batches
                        # still form under load. Full batches do not wait: they pipeline.
                        break
                expires_in = batch.created + timeout - now
                if wake_in is None or expires_in < wake_in:
                    wake_in = expires_in
                info = topics.get(q.topic)
                pinfo = info.partitions.get(q.partition) if info is not None else None
                if pinfo is None or pinfo.leader < 0:
                    self._metadata_wanted.add(q.topic)
                    break
                node = pinfo.leader
                node_requests = requests.get(node)
                if node_requests is None:
                    node_requests = requests[node] = []
                    request_bytes[node] = []
                if k >= len(node_requests) and self._in_flight_by_node.get(node, 0) + k >= max_in_flight:
                    break  # a response from that broker wakes us
                conn = connections.get(node) or connected(node)
                if conn is None:
                    # Batches go out only on an open connection, written in drain order: a request
                    # that connected for itself could reach the broker after a later batch's, and
                    # a broker with no state for this producer would store that one first (any
                    # sequence is accepted from an unknown producer, KIP-360).
                    retry_in = self._want_connection(tg, node, now)
                    if retry_in is not None:
                        wake_in = _sooner(wake_in, retry_in)
                    error = self._connect_errors.get(node)
                    if error is not None:
                        batch.last_error = error  # what the delivery timeout then reports
                    break
                connections[node] = conn
                if batch.attempts and flying and not idempotence.may_send_retry(
                        batch.attempts, self._earlier_elsewhere(flying_batches, batch, conn)):  # type: ignore[arg-type]
                    break  # the earlier batch's answer (or failure) wakes us
                if k < len(node_requests) and request_bytes[node][k] + batch.size > config.max_request_size:
                    wake_in = 0.0  # the next pass's request can take it right away
                    break
                acc.drain(q, batch)
                if flying_batches is None:
                    in_flight[q.key] = [batch]
                elif flying_batches and flying_batches[-1].order > batch.order:
                    _insert_by_order(flying_batches, batch)  # a retry overtakes nothing: keep the order
                else:
                    flying_batches.append(batch)
                batch.sent_on = conn
                if batch.wire is None:
                    if idempotence.enabled:
                        batch.seal(config.compression, *idempotence.stamp(batch), txn is not None)  # type: ignore[arg-type]
                    else:
                        batch.seal(config.compression, -1, -1, -1)  # type: ignore[arg-type]
                if k < len(node_requests):
                    node_requests[k].append(batch)
                    request_bytes[node][k] += len(batch.wire)  # type: ignore[arg-type]
                else:
                    node_requests.append([batch])
                    request_bytes[node].append(len(batch.wire))  # type: ignore[arg-type]
                k += 1
        for node, node_requests in requests.items():
            for batches in node_requests:  # in order: a partition's batches leave in drain order
                self._send_request(node, connections[node], batches, now)
        if any(requests.values()):
            wake_in = _sooner(wake_in, self._request_timeout_s)  # when the new ones would time out
        if self._metadata_wanted and self._metadata_task is None:
            if now >= self._metadata_retry_at:
                self._metadata_task = tg.create_task(self._refresh_metadata(), name="pulllog-producer-metadata")
            else:
                wake_in = _sooner(wake_in, self._metadata_retry_at - now)
        return wake_in

    # ------------------------------------------------------------------ transactions

    def _txn_pass(self, tg: asyncio.TaskGroup) -> bool:
        """A transactional producer's part of a pass: fail the unsent batches of a transaction
        that failed or is being aborted (True: send nothing), else start AddPartitionsToTxn for
        the partitions new to the transaction (their batches wait for it)."""
        txn: TransactionManager = self._idempotence  # type: ignore[assignment]
        error = txn.unsent_batches_fail_with()
        if error is not None:
            for batch in self._acc.abort_unsent():
                self._fail(batch, error)
            return True
        if self._add_partitions_task is None and self.txn_coordinator is not None:
            partitions = txn.partitions_to_add()
            if partitions:
                self._add_partitions_task = tg.create_task(self._add_partitions(partitions),
                                                           name="pulllog-producer-add-partitions")
        return False

    async def add_partitions_done(self) -> None:
        """Wait for the AddPartitionsToTxn in flight, if any: a commit or an abort must know
        whether the coordinator has the transaction before it decides to send EndTxn."""
        task = self._add_partitions_task
        if task is not None:
            await asyncio.wait([task])

    async def _add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for every partition new to the transaction, in one request (a
        failure puts the transaction in its abortable or fatal state: the next pass fails the
        batches waiting)."""
        txn: TransactionManager = self._idempotence  # type: ignore[assignment]
        try:
            await self.txn_coordinator.add_partitions(partitions)  # type: ignore[union-attr]
            txn.partitions_added(partitions)
        except KafkaError as exc:
            log.info("adding %s to the transaction failed: %s", partitions, exc)
        except TimeoutError as exc:
            txn.fail(Outcome.ABORTABLE, KafkaError(ErrorCode.request_timed_out, str(exc)))
        finally:
            self._add_partitions_task = None
            self._wakeup.set()

    # ------------------------------------------------------------------ batches in flight

    def _landed(self, batch: ProducerBatch) -> None:
        """``batch`` is no longer in flight (answered, failed or back for a retry)."""
        batch.sent_on = None
        flying = self._in_flight.get((batch.topic, batch.partition))
        if not flying:
            return
        if flying[0] is batch:
            del flying[0]  # answers mostly come oldest first
        elif batch in flying:
            flying.remove(batch)

    @property
    def in_flight_map(self) -> dict[tuple[str, int], list[ProducerBatch]]:
        """(topic, partition) -> its batches in flight, oldest first: the sender's own map,
        which the producer's C send path reads (``partition_busy``'s rule) and never changes."""
        return self._in_flight

    def partition_busy(self, key: tuple[str, int]) -> bool:
        """Are all of the partition's in-flight slots taken? Then only an answer (which wakes
        the sender) lets it send more of that partition."""
        flying = self._in_flight.get(key)
        return flying is not None and len(flying) >= self._partition_limit

    def in_flight(self, topic: str, partition: int) -> list[ProducerBatch]:
        """The partition's batches in flight, oldest first (a copy)."""
        return list(self._in_flight.get((topic, partition), ()))

    def _earlier_elsewhere(self, flying: list[ProducerBatch], batch: ProducerBatch, conn: KafkaConnection) -> bool:
        """Is an earlier batch of ``batch``'s partition in flight on a connection other than
        ``conn`` (one that failed, its batches not back yet)? Then a retry of ``batch`` on
        ``conn`` could overtake it."""
        return any(b.order < batch.order and b.sent_on is not conn for b in flying)

    def _earlier_in_flight(self, batch: ProducerBatch) -> bool:
        flying = self._in_flight.get((batch.topic, batch.partition))
        return bool(flying) and flying[0].order < batch.order  # type: ignore[index]

    # ------------------------------------------------------------------ requests

    async def init_producer_id(self) -> None:
        """InitProducerId for a new producer id (at start), so batches can carry it.

        Retried, as Kafka's producer does, on a retriable error code (a broker of a cluster
        answers COORDINATOR_LOAD_IN_PROGRESS until it has a block of producer ids from its
        controller) and on a lost connection (asked again of another broker), for up to
        ``max_block_ms``."""
        deadline = time.monotonic() + self.config.max_block_s
        backoff = max(self.config.retry_backoff_s, 0.01)
        while True:
            try:
                conn = await self._cluster.any_connection()
                lowest, highest, data = self._idempotence.init_producer_id_request()
                version = conn.version("init_producer_id", lowest, highest)
                async with asyncio.timeout(self.config.request_timeout_s):
                    resp = await conn.request("init_producer_id", version, data)
            except (ConnectionError, TimeoutError) as exc:
                error: BaseException = exc
            else:
                code = resp.error_code
                if code == ErrorCode.none:
                    self._idempotence.set_producer_id_and_epoch(int(resp.producer_id), int(resp.producer_epoch))
                    return
                error = KafkaError(code, f"{code.name.upper()}: InitProducerId failed, "
                                         "so enable_idempotence=True cannot work with this broker")
                if not code.retriable:
                    raise error
            if time.monotonic() + backoff >= deadline:
                raise error
            log.debug("InitProducerId failed (%s); retrying", error)
            await asyncio.sleep(backoff)

    async def _bump_epoch(self) -> None:
        """KIP-360: the next epoch of our producer id (see ``pulllog.client.idempotence``)."""
        idempotence = self._idempotence
        try:
            conn = await self._cluster.any_connection()
            lowest, highest, data = idempotence.init_producer_id_request()
            version = conn.version("init_producer_id", lowest, highest)
            async with asyncio.timeout(self.config.request_timeout_s):
                resp = await conn.request("init_producer_id", version, data)
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, f"{resp.error_code.name.upper()}: InitProducerId failed")
            old = (idempotence.producer_id, idempotence.producer_epoch)
            # retries first, in send order; unsealed ones get theirs when sent
            idempotence.set_producer_id_and_epoch(int(resp.producer_id), int(resp.producer_epoch),
                                                  self._acc.waiting())
            log.info("producer %d epoch %d -> producer %d epoch %d after a batch failed for good",
                     *old, idempotence.producer_id, idempotence.producer_epoch)
        except UnsupportedByBrokerError as exc:
            # an old broker: go on under this epoch (later batches of the failed batch's
            # partition are refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and say so)
            log.warning("cannot take a new producer epoch (%s); records after a failed batch may fail too", exc)
            idempotence.epoch_bump_unsupported()
        except _FAILURES as exc:
            log.info("taking a new producer epoch failed (%s); retrying", exc)
            await asyncio.sleep(max(self.config.retry_backoff_s, 0.01))
        finally:
            self._epoch_bump_task = None
            self._wakeup.set()

    def _want_connection(self, tg: asyncio.TaskGroup, node: int, now: float) -> float | None:
        """Start connecting to ``node`` unless that is under way or backing off after a
        failure; return seconds until the next attempt (None: the running one wakes us)."""
        if node in self._connecting:
            return None
        retry_at = self._connect_retry_at.get(node, 0.0)
        if retry_at > now:
            return retry_at - now
        self._connecting[node] = tg.create_task(self._connect(node), name=f"pulllog-producer-connect[{node}]")
        return None

    async def _connect(self, node: int) -> None:
        try:
            async with asyncio.timeout(self._request_timeout_s):
                await self._cluster.connection(node)
            self._connect_errors.pop(node, None)
            self._connect_retry_at.pop(node, None)
        except asyncio.CancelledError:
            raise
        except (*_FAILURES, UnsupportedByBrokerError) as exc:
            log.debug("connecting to broker %d failed: %s", node, exc)
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"no connection to broker {node} within request_timeout_ms={self.config.request_timeout_ms}")
            self._connect_errors[node] = exc
            self._connect_retry_at[node] = time.monotonic() + max(self.config.retry_backoff_s, 0.01)
            # the leader may have moved: look its partitions up again
            self._metadata_wanted.update(
                t for t, info in self._cluster.topics.items() if t in self._topics
                and any(p.leader == node for p in info.partitions.values()))
        finally:
            del self._connecting[node]
            self._wakeup.set()

    async def _refresh_metadata(self) -> None:
        topics = sorted(self._metadata_wanted | set(self._topics))
        self._metadata_wanted.clear()
        try:
            await self._cluster.refresh(topics, allow_auto_create=True)
            self._on_metadata(topics)
            self.last_metadata = time.monotonic()
        except _FAILURES as exc:
            log.debug("metadata refresh for %s failed: %s", topics, exc)
            self._metadata_wanted.update(topics)
            self._metadata_retry_at = time.monotonic() + max(self.config.retry_backoff_s, 0.01)
        finally:
            self._metadata_task = None
            self._wakeup.set()

    def _send_request(self, node: int, conn: KafkaConnection, batches: list[ProducerBatch], now: float) -> None:
        """One Produce request to one broker on ``conn`` (open when the batches were drained,
        and never replaced here: see ``_pass``), written at once; ``_answered`` handles the
        answer (module docstring: Requests)."""
        config = self.config
        try:
            encoder = self._encoders.get(node)
            if encoder is None or encoder[0] is not conn:
                version = conn.version("produce", 3, 9)
                encoder = self._encoders[node] = (conn, ProduceRequestEncoder(
                    version, conn.client_id, self._transactional_id, config.acks, config.request_timeout_ms))
                conn.after_frames = self._after_answers
            correlation_id = next(conn.correlation_ids)
            if len(batches) == 1:
                batch = batches[0]
                frame = encoder[1].frame_one(correlation_id, batch.topic, batch.partition, batch.wire)  # type: ignore[arg-type]
            else:
                by_topic: dict[str, list[tuple[int, bytes | None]]] = {}
                for batch in batches:
                    by_topic.setdefault(batch.topic, []).append((batch.partition, batch.wire))
                frame = encoder[1].frame(correlation_id, list(by_topic.items()))
            if config.acks == 0:
                conn.send(correlation_id, frame, None, hold=True)
                self._held.append(conn)
                for batch in batches:
                    self._complete(batch, -1, -1)
                return
            request = _make_request(self, node, conn, batches, encoder[1], encoder[1].version,
                                    now + self._request_timeout_s,
                                    batches[0] if len(batches) == 1 and self._transactional_id is None else None)
            conn.send(correlation_id, frame, request, hold=True)
            self._held.append(conn)
        except ConnectionError as exc:  # closed since it was drained
            self._retry_or_fail(batches, exc, retriable=True, stale=True)
            return
        except UnsupportedByBrokerError as exc:
            self._retry_or_fail(batches, exc, retriable=False)
            return
        self._requests[request] = None
        self._in_flight_by_node[node] = self._in_flight_by_node.get(node, 0) + 1

    def _flush_held(self) -> None:
        """Write this turn's requests, one write per connection (``KafkaConnection.send``'s hold)."""
        held = self._held
        if held:
            self._held = []
            for conn in dict.fromkeys(held):
                conn.flush()

    def _expire_requests(self, now: float) -> float | None:
        """Requests unanswered after ``request_timeout_ms``: close their connection (its later
        answers would be stale; we reconnect) and retry their batches. Returns seconds until
        the oldest request left times out (every request has the same timeout, so the oldest
        is the first in ``_requests``)."""
        requests = self._requests
        while requests:
            request = next(iter(requests))
            if request.deadline > now:
                return request.deadline - now
            self._request_done(request)
            conn = request.conn
            self._retry_or_fail(request.batches, TimeoutError(
                f"no answer from {conn.address} within request_timeout_ms={self.config.request_timeout_ms}"),
                retriable=True, stale=True)
            conn.abort(ConnectionClosedError(f"no answer within request_timeout_ms={self.config.request_timeout_ms}"))
        return None

    def _request_done(self, request: _Request, wake: bool = True) -> bool:
        """Take ``request`` off the requests in flight; False if it was already (timed out,
        or failed at close) and its answer is to be ignored. ``wake``: the sender's loop
        makes its next pass (else the caller sees to it)."""
        requests = self._requests
        if request not in requests:
            return False
        del requests[request]
        self._in_flight_by_node[request.node] -= 1
        if wake:
            self._wakeup.set()
        return True

    def _fail_requests(self, error: BaseException) -> None:
        """The sender stops: every request in flight fails its batches with ``error``."""
        for request in list(self._requests):
            self._request_done(request)
            for batch in request.batches:
                self._fail(batch, error)

    def _answered(self, request: _Request, frame: bytes | None, error: BaseException | None) -> None:
        """The connection's answer to ``request``: its response frame, or why it has none.

        A batch acknowledged without error (the usual answer, read by ``_Request.__call__``
        before it calls this for any other) leaves its in-flight slot at once but is
        completed by ``_after_answers``, after the requests for the freed slots were
        written: the broker works on those while the client completes these."""
        batches = request.batches
        if error is not None:  # the connection ended (ConnectionClosedError)
            if self._request_done(request):
                self._retry_or_fail(batches, error, retriable=True, stale=True)
            return
        if not self._request_done(request, wake=False):
            return
        if len(batches) == 1:
            # (an error-free answer outside a transaction was read by _Request.__call__)
            batch = batches[0]
            self._wakeup.set()
            result = request.encoder.one_partition_answer(frame, batch.topic)  # type: ignore[arg-type]
            if result is not None and result.index == batch.partition:
                self._batch_answered(batch, result)
                return
        self._wakeup.set()
        try:
            _correlation_id, topics, _throttle_ms = decode_produce_response(frame, request.version)  # type: ignore[arg-type]
        except (MalformedError, UnicodeDecodeError) as exc:
            log.error("the Produce response from broker %d does not decode: %s", request.node, exc)
            self._retry_or_fail(batches, InvalidResponseError(
                f"ProduceResponse v{request.version} from {request.conn.address} does not decode: {exc}"),
                retriable=False)
            return
        if len(batches) == 1 and len(topics) == 1 and len(topics[0].partitions) == 1:
            # one batch, one answer (a one-partition producer's every request): no lookup
            batch, result = batches[0], topics[0].partitions[0]
            if topics[0].name == batch.topic and result.index == batch.partition:
                self._batch_answered(batch, result)
                return
        results = {(t.name, p.index): p for t in topics for p in t.partitions}
        for batch in batches:
            found = results.get((batch.topic, batch.partition))
            if found is None:
                self._retry_or_fail([batch], KafkaError(
                    ErrorCode.unknown_server_error,
                    f"UNKNOWN_SERVER_ERROR: the broker's Produce response left out {batch.topic}-{batch.partition}"),
                    retriable=False)
            else:
                self._batch_answered(batch, found)

    def _turn(self, tg: asyncio.TaskGroup) -> float | None:
        """Passes while more is sendable now (a partition has more batches and free in-flight
        slots, one batch per request), so the requests leave together in one write
        (_flush_held); the last pass's delay."""
        delay = self._pass(tg)
        for _ in range(_PASSES_PER_TURN):
            if delay is None or delay > 0:
                break
            delay = self._pass(tg)
        self._flush_held()
        return delay

    def _after_answers(self) -> None:
        """After a read's answers were handled (``KafkaConnection.after_frames``): fill the
        in-flight slots they freed and write those requests, in this same turn of the event
        loop (the sender's loop would take a turn more), then complete the acknowledged
        batches (``_answered``)."""
        if not self._answers_read:
            return
        self._answers_read = False
        try:
            tg = self._tg
            if tg is None or self._stopping or self._callback_error is not None:
                self._wakeup.set()  # the loop sees to it (or leaves)
            else:
                delay = self._turn(tg)
                if delay is not None:
                    if delay <= 0:
                        self._wakeup.set()
                    else:
                        self._wake_within(delay)
        except BaseException as exc:  # a bug: run() raises it
            if self._callback_error is None:
                self._callback_error = exc
            self._wakeup.set()
        finally:
            self._tell_acked()

    def _tell_acked(self) -> None:
        """Complete the acknowledged batches held back (``_answered``), in their answers'
        order. Called before any other outcome is told as well: a read's answers come in
        their requests' order, so the held-back batch of a partition is older than one of its
        batches completed at once (from a request with more partitions) or failed meanwhile
        (expired by the pass), and Kafka tells a partition's outcomes in order."""
        acked, self._acked = self._acked, []
        # _acknowledged, written out (a batch-1 producer's every record), their memory freed
        # in one call: these batches are never a transaction's (_Request.one)
        if not acked:
            return
        if len(acked) == 1:
            told = [acked[0][0]] if not acked[0][0].result.finished else []
        else:
            told = [batch for batch, _ack in acked if not batch.result.finished]
            if len(told) < len(acked):
                acked = [(batch, ack) for batch, ack in acked if not batch.result.finished]
        if not told:
            return
        self._acc.deallocate_all(told)
        for batch, (base_offset, log_append_time) in acked:
            batch.result.set_acknowledged(base_offset, log_append_time)  # every record's future at once
            if batch.set_futures:
                _tell_sets(batch, base_offset, log_append_time)

    def _batch_answered(self, batch: ProducerBatch, result: PartitionProduceResponse) -> None:
        code = result.error_code
        if code == 0:
            self._complete(batch, result.base_offset, result.log_append_time_ms)
        elif code == ErrorCode.duplicate_sequence_number:
            self._complete(batch, -1, -1)  # already appended by an earlier attempt
        elif code == ErrorCode.out_of_order_sequence_number:
            self._out_of_order(batch, result)
        elif code == ErrorCode.message_too_large and self._split(batch):
            pass  # its pieces are back in the queue
        else:
            error = produce_error(batch, result)
            self._retry_or_fail([batch], error, retriable=error.retriable, stale=code in _STALE_METADATA)

    # ------------------------------------------------------------------ outcomes

    def _split(self, batch: ProducerBatch) -> bool:
        """MESSAGE_TOO_LARGE for a batch of more than one record (or set): split it in two and
        send the pieces in its place (Kafka's split-and-reenqueue); False if it cannot be cut,
        and then it fails. With idempotence the pieces take the batch's sequences in order,
        so the partition's later batches (refused meanwhile as out of order) follow them."""
        if batch.result.finished or self.closed:
            return False
        pieces = self._acc.split(batch)
        if pieces is None:
            return False
        log.debug("split %r in %d after MESSAGE_TOO_LARGE", batch, len(pieces))
        self._landed(batch)
        compression = self.config.compression
        if self._idempotence.enabled and batch.base_sequence >= 0:
            pe = self._idempotence.producer_id_and_epoch
            sequence = batch.base_sequence
            for piece in pieces:
                piece.seal(compression, pe.producer_id, pe.epoch, sequence,  # type: ignore[arg-type]
                           self._idempotence.transactional)
                sequence = (sequence + piece.count) % 2**31
        self._acc.reenqueue_split(pieces)
        return True

    def _out_of_order(self, batch: ProducerBatch, result: PartitionProduceResponse) -> None:
        """OUT_OF_ORDER_SEQUENCE_NUMBER: expected while an earlier batch of the partition is
        unacknowledged (it failed, or is in flight and may fail: the broker refused this one
        because that one is missing), so resend this one after it. Otherwise the broker lost
        the sequence (an earlier batch failed for good, or the log was truncated): fail."""
        error = produce_error(batch, result)
        earlier = self._acc.earlier_ready(batch) or self._earlier_in_flight(batch)
        if self._idempotence.out_of_order_retriable(earlier):
            self._retry_or_fail([batch], error, retriable=True)
            return
        self._retry_or_fail([batch], KafkaError(error.code, (
            f"{error}; no earlier batch of this partition is pending, so the broker's sequence no longer "
            "matches this producer's (an earlier batch failed for good, or the log was truncated): later "
            "records of this partition may fail too; close the producer and create a new one")), retriable=False)

    def _retry_or_fail(self, batches: list[ProducerBatch], error: BaseException, *, retriable: bool,
                       stale: bool = False) -> None:
        config = self.config
        now = time.monotonic()
        backoff = config.retry_backoff_s
        timeout = config.delivery_timeout_s
        for batch in batches:
            if batch.result.finished:
                continue  # failed meanwhile (closed)
            batch.last_error = error
            if stale:
                self._cluster.invalidate(batch.topic)
                self._metadata_wanted.add(batch.topic)
            if (retriable and batch.attempts < config.retries and not self.closed
                    and now + backoff < batch.created + timeout):
                log.debug("retrying %r after %s", batch, error)
                self._landed(batch)
                self._acc.reenqueue(batch, now + backoff)
            elif retriable and now + backoff >= batch.created + timeout:
                self._expire(batch, now)
            else:
                self._fail(batch, error)

    def _expire_now(self, batch: ProducerBatch) -> None:
        self._expire(batch, time.monotonic())

    def _expire(self, batch: ProducerBatch, now: float) -> None:
        last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
        self._fail(batch, DeliveryTimeoutError(
            f"{batch.count} record(s) for {batch.topic}-{batch.partition} not acknowledged within "
            f"delivery_timeout_ms={self.config.delivery_timeout_ms}{last}"))

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.result.finished:
            return  # failed meanwhile (closed): its outcome is told already
        self._landed(batch)
        if self._acked:
            self._tell_acked()  # older batches of the partition first
        self._acknowledged(batch, base_offset, log_append_time)

    def _acknowledged(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        """``batch`` (no longer in flight) was acknowledged: tell its records' futures."""
        if batch.result.finished:
            return
        if self._transactional_id is not None:
            self._idempotence.batch_acknowledged((batch.topic, batch.partition))  # type: ignore[attr-defined]
        self._acc.deallocate(batch)
        batch.result.set_acknowledged(base_offset, log_append_time)  # every record's future at once
        if batch.set_futures:
            _tell_sets(batch, base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.result.finished:
            return
        if self._acked:
            self._tell_acked()  # older batches of the partition first
            if batch.result.finished:
                return  # it was one of them
        self._idempotence.batch_failed(batch, closing=self.closed, error=error)
        self._landed(batch)
        self._acc.deallocate(batch)
        batch.result.set_failed(error)
        for _first, _count, _ts, future in batch.set_futures:
            if not future.done():
                future.set_exception(error)

    def abort(self, error: BaseException) -> None:
        """Fail every batch not done yet with ``error`` (the producer is closed, or broke)."""
        for batch in self._acc.abort():
            self._fail(batch, error)


class _Request:
    """A Produce request in flight, and its connection's callback for the answer."""

    __slots__ = ("sender", "node", "conn", "batches", "encoder", "version", "deadline", "one")

    def __init__(self, sender: Sender, node: int, conn: KafkaConnection, batches: list[ProducerBatch],
                 encoder: ProduceRequestEncoder, deadline: float) -> None:
        self.sender, self.node, self.conn, self.batches = sender, node, conn, batches
        self.encoder, self.version, self.deadline = encoder, encoder.version, deadline
        # its one batch, outside a transaction: an error-free answer is read right here
        self.one = batches[0] if len(batches) == 1 and sender._transactional_id is None else None

    def __call__(self, frame: bytes | None, error: BaseException | None) -> None:
        sender = self.sender
        try:
            batch = self.one
            if batch is None or error is not None:
                sender._answered(self, frame, error)
                return
            # the usual answer (``_answered``'s first case, written out: one call per answer)
            requests = sender._requests
            if self in requests:
                ack = self.encoder.ack_one(frame, batch.topic, batch.partition)  # type: ignore[arg-type]
                if ack is not None:
                    del requests[self]
                    sender._in_flight_by_node[self.node] -= 1
                    # sender._landed(batch), written out for its usual case (the oldest answered first)
                    batch.sent_on = None
                    flying = sender._in_flight.get((batch.topic, batch.partition))
                    if flying:
                        if flying[0] is batch:
                            del flying[0]
                        elif batch in flying:
                            flying.remove(batch)
                    sender._acked.append((batch, ack))
                    sender._answers_read = True
                    return
            sender._answered(self, frame, error)
        except BaseException as exc:  # a bug: run() raises it, as a request task's would have
            if sender._callback_error is None:
                sender._callback_error = exc
            sender._wakeup.set()


# _Request(sender, node, conn, batches, encoder, deadline) for a Produce request, one per
# batch at batch_size=1: with the C extension a copy of a template with its eight slots set
# (version and one as __init__ computes them), without __init__'s Python frame
def _py_make_request(sender: Sender, node: int, conn: KafkaConnection, batches: list[ProducerBatch],
                     encoder: ProduceRequestEncoder, version: int, deadline: float,
                     one: ProducerBatch | None) -> _Request:
    return _Request(sender, node, conn, batches, encoder, deadline)


_make_request: Callable[..., _Request] = (
    _py_make_request if SlotsMaker is None
    else SlotsMaker(_Request.__new__(_Request), _Request.__slots__))  # type: ignore[arg-type]

# BatchMetadata(topic, partition, base_offset, count, timestamp), one per message set: the
# frozen dataclass's __init__ stores each field through object.__setattr__ from Python
_new_batch_metadata: Callable[[str, int, int, int, int], BatchMetadata] = (
    BatchMetadata if SlotsMaker is None
    else SlotsMaker(BatchMetadata("", -1, -1, 0, -1), ("topic", "partition", "base_offset", "count", "timestamp")))


def _tell_sets(batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
    """Resolve the futures of ``batch``'s message sets (``send_batch()``), acknowledged."""
    topic, partition = batch.topic, batch.partition
    for first, count, ts, future in batch.set_futures:
        if not future.done():
            future.set_result(_new_batch_metadata(topic, partition, base_offset + first if base_offset >= 0 else -1,
                                                  count, ts if log_append_time < 0 else log_append_time))


def _insert_by_order(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for i, other in enumerate(batches):
        if other.order > batch.order:
            batches.insert(i, batch)
            return
    batches.append(batch)


def _sooner(current: float | None, candidate: float) -> float:
    return candidate if current is None or candidate < current else current


def produce_error(batch: ProducerBatch, result: PartitionProduceResponse) -> KafkaError:
    """The KafkaError for a partition's error in a Produce answer, with the broker's words."""
    code = ErrorCode(result.error_code)
    text = f"{code.name.upper()} producing {batch.count} record(s) to {batch.topic}-{batch.partition}"
    if result.error_message:
        text += f": {result.error_message}"
    # INVALID_RECORD names the bad records; add any the summary message does not mention
    record_errors = [f"record {index}: {message}" for index, message in result.record_errors
                     if message and message not in text]
    if record_errors:
        text += " (" + "; ".join(record_errors) + ")"
    if code == ErrorCode.message_too_large:
        text += (" (the topic's max.message.bytes is smaller than this record, or message set, alone: "
                 "send smaller records or raise it)")
    return KafkaError(code, text)
