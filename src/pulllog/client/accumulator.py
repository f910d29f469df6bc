"""Records waiting to be sent: one queue of batches per partition, and ``buffer_memory``.

A batch lives through these states; ``send()`` closes a full batch, and the producer's
sender (``pulllog.client.sender``) does the rest, through the accumulator's small sender
API (``next_ready``, ``open_batch``, ``drain``, ``reenqueue``, ``deallocate``, ...); nothing
else touches a ``PartitionQueue``::

    open ──(full, or drained by the sender)──> ready ──(sent)──> in flight ──> done
                                                 ^                   │
                                                 └───(retriable error: back into the
                                                      queue in its place, after backoff)

* **open**: the partition's one batch that accepts records. ``send()`` encodes each record
  straight into its records section (RecordBatch v2 record format, see
  ``pulllog.records.batch``), so nothing is encoded twice and the memory it holds is known.
  A record that would push the batch past ``batch_size`` closes it and opens the next one;
  a record larger than ``batch_size`` gets a batch of its own.
* **ready**: closed batches in partition order. On its first send a batch is *sealed*:
  compressed as one block, the 61-byte header written, and one CRC-32C computed over
  attributes .. end. A retry resends the same bytes (same producer id, epoch and
  sequence), so a retried batch is never re-encoded.
* **in flight**: up to ``max_in_flight`` batches per partition, kept by the sender (oldest
  first), each in its own request: a request carries at most one batch per partition.
  Every batch gets ``order``, its place in the partition, when it closes; batches are sent
  in that order. A batch that fails retriably goes back into ``ready`` *by order*, not
  simply to the head: answers for batches behind it may fail too (a lost connection fails
  them all, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER), in any order, and they are resent in
  their original order with their original bytes. With idempotence the broker refuses a
  batch that does not follow the last one it stored, so the log keeps the send order; the
  rules for that are in ``pulllog.client.idempotence`` and ``pulllog.client.producer``
  (Ordering and retries).
* **split**: a batch of more than one record refused as MESSAGE_TOO_LARGE (the topic's
  max.message.bytes is below ``batch_size``) is cut in two (``split``), never inside a
  ``send_batch`` set, and the pieces take its place in ``ready`` (their ``order`` within
  its ``span``), its memory and, with idempotence, its sequence range in order, so the
  partition's later batches follow them; a piece still too large is cut again. Its
  ``ProduceResult`` then answers each record from its piece's (``split_into``); a record or
  a set that alone is too large fails.
* **done**: acknowledged or failed; the batch's one ``ProduceResult`` resolves, which
  completes the futures of all its records and sets at once (``pulllog.client.record_future``),
  and the batch's bytes go back to ``buffer_memory``.

``buffer_memory`` is the sum of the records' sizes (plus a fixed per-record allowance for
the bookkeeping around them) over all batches not yet done. ``send()`` reserves before it
appends; when the buffer is full it waits, first come first served, until the sender's
acknowledgements release enough (``BufferPool``).

Encoding cost is the hot path. A batch's records section is a ``RecordsBuilder``
(``pulllog.records.encoding``: a bytearray that also counts the records, their latest
timestamp and the buffer_memory they hold), in C when the extension is built, else in
Python. ``append()``'s common case, a record for the partition it had last whose open batch
has room, is one call on it (``add``): room checked, record encoded and counted, memory
held, the record's ``RecordFuture`` made (copied from a template in C, ``SlotsMaker``,
rather than running its ``__init__``); a new batch's ``ProducerBatch`` and ``ProduceResult``
are copied from templates the same way (``new_batch``), and sealing an uncompressed batch is
the builder's ``seal``: header, records and CRC in one bytes object. The producer's C send path (``records.encoding.SendPath``)
does that same step for a record without a Python frame at all: it reads a queue's ``open``
batch, that batch's ``records`` and the pool's ``available`` and ``waiters`` through their
slots, so those stay ``__slots__``. It also opens a batch for a record (and ``SetPath`` for a
message set) of an explicit partition with no open batch, as ``append`` does: the batch made
by ``makers``, added to ``incomplete``, and closed at once when full (the queue's ``closed``,
``ready``, the batch's ``order``, ``set_futures``: slots too). A message set of plain values and keys is one call
too (``add_values``); the general message-set encoder (headers, a timestamp per record) is
``ProducerBatch.extend``'s loop, where varints of small non-negative values (lengths, offset
and timestamp deltas) come from a precomputed table of their zigzag encodings and each
record becomes one ``bytes.join`` of ready-made pieces.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from crc32c import crc32c

from ..records.compression import Compression, compress
from ..records.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, RecordBatch
from ..records.varint import ZIGZAG, ZIGZAG_TABLE_SIZE, encode_varint
from ..records.encoding import RecordsBuilder, SlotsMaker, values_size
from .record_future import ProduceResult, RecordFuture

__all__ = [
    "APPENDED",
    "NEW_BATCH",
    "RECORD_OVERHEAD",
    "REROUTE",
    "BufferPool",
    "PartitionQueue",
    "ProducerBatch",
    "RecordAccumulator",
    "encode_headers",
    "estimate_set_size",
    "new_record_future",
]

# Bytes buffer_memory counts per record on top of key, value and headers: the record's own
# framing (length, attributes, deltas, lengths: 9-19 bytes) rounded up for the bookkeeping.
RECORD_OVERHEAD = 24
_OVERESTIMATE = RECORD_OVERHEAD - 10  # a typical record's framing is ~10 bytes: fill batches by that

# The batch header of pulllog.records.batch, packed once per batch in two parts: up to the
# crc (baseOffset, batchLength, partitionLeaderEpoch, magic, crc), and what the crc covers
# with the records (attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordsCount).
_HEADER_HEAD = struct.Struct(">qiibI")
_HEADER_TAIL = struct.Struct(">hiqqqhii")
_CRC_START = _HEADER_HEAD.size
# producerId, producerEpoch, baseSequence: where they sit in the header (offset 43)
_PRODUCER_FIELDS = struct.Struct(">qhi")
_PRODUCER_FIELDS_AT = 43
_MAGIC = 2
_TRANSACTIONAL = 0x10  # attributes bit 4: the batch belongs to a transaction
# seal()'s codec test and attributes without an enum lookup or int() per batch (each cost
# about as much as packing the header)
_UNCOMPRESSED = Compression.NONE
_CODEC_BITS = {codec: int(codec) for codec in Compression}

# The record encoder below looks small sizes and deltas up in records.varint's ZIGZAG table
# (``vt[n] if n < size else encode_varint(n)``) rather than calling encode_varint, which does
# the same lookup: a call per field would cost as much as the field.
_TABLE_SIZE = ZIGZAG_TABLE_SIZE

# what RecordAccumulator.append did with a record
APPENDED, NEW_BATCH, REROUTE = 0, 1, -1

# RecordFuture(result, relative_offset, timestamp), once per send(): with the C extension a
# copy of a template future with those three slots set, which is what __init__ makes (its
# other slots are constants) without its Python frame and eight stores
# (tests/records/test_encoding.py checks they agree).
new_record_future: Callable[[ProduceResult, int, int], RecordFuture] = (
    RecordFuture if SlotsMaker is None
    else SlotsMaker(RecordFuture(None, 0, 0), ("_result", "relative_offset", "_timestamp")))  # type: ignore[arg-type]

_NULL = b"\x01"  # varint(-1): a null key, value or header value
_NO_HEADERS = b"\x00"


def encode_headers(headers: Iterable[tuple[str | bytes, bytes | None]] | Mapping[str, bytes | None] | None) -> bytes:
    """The headers part of a record: count, then key and value per header."""
    if not headers:
        return _NO_HEADERS
    items = headers.items() if isinstance(headers, Mapping) else headers
    parts: list[bytes] = []
    count = 0
    for hkey, hvalue in items:
        kb = hkey.encode("utf-8") if isinstance(hkey, str) else bytes(hkey)
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            if isinstance(hvalue, str):
                raise TypeError(f"header {hkey!r}: values must be bytes or None, not str (encode it first)")
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
        count += 1
    return encode_varint(count) + b"".join(parts)


def _headers_estimate(headers: Any) -> int:
    if not headers:
        return 1
    items = headers.items() if isinstance(headers, Mapping) else headers
    return 1 + sum(len(k) + (len(v) if v is not None else 0) + 6 for k, v in items)


def estimate_set_size(items: Sequence[Any]) -> int:
    """buffer_memory for a message set (see ``ProducerBatch.extend`` for the item forms)."""
    if values_size is not None:  # plain values and keys: added up in C, in one call
        total = values_size(items)
        if total >= 0:
            return total + RECORD_OVERHEAD * len(items)
    total = 0
    for item in items:
        if type(item) is bytes:
            total += len(item)
        elif item is None:
            pass
        elif isinstance(item, tuple):
            key, value = item[0], item[1]
            if key is not None:
                total += len(key)
            if value is not None:
                total += len(value)
            if len(item) > 2:
                total += _headers_estimate(item[2])
        else:
            total += len(item)  # bytearray / memoryview values
    return total + RECORD_OVERHEAD * len(items)


class ProducerBatch:
    """One RecordBatch being built for one partition, and who waits for its outcome."""

    __slots__ = (
        "topic", "partition", "records", "sealed_count", "base_timestamp", "sealed_max_timestamp",
        "set_futures", "held", "created", "attempts", "retry_at", "wire", "base_sequence", "last_error",
        "result", "order", "span", "sent_on",
    )

    # The class that encodes the records section: pulllog.records.encoding's choice (C or
    # Python); the C-against-Python tests swap it here.
    builder: type[Any] = RecordsBuilder

    def __init__(self, topic: str, partition: int, base_timestamp: int, created: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.topic = topic
        self.partition = partition
        # the outcome all its records' futures read (send() keeps no per-record state here)
        self.result = ProduceResult(topic, partition, loop)
        # the records section and its count, timestamps and the buffer_memory its records
        # hold (a RecordsBuilder) until sealed; its add() makes each record's future
        self.records: Any = self.builder(base_timestamp, self.result, new_record_future)
        self.sealed_count = 0
        self.base_timestamp = base_timestamp
        self.sealed_max_timestamp = base_timestamp
        # (first offset delta, count, first timestamp, future) per message set (send_batch);
        # the shared empty tuple until the first set (a batch of send()'s records has none,
        # and one list fewer per batch is one object fewer for the garbage collector)
        self.set_futures: list[tuple[int, int, int, asyncio.Future[Any]]] | tuple[()] = ()
        self.held = 0  # buffer_memory to give back when done, besides the open records' (``reserved``)
        self.created = created  # monotonic seconds: delivery_timeout_ms counts from here
        self.attempts = 0  # retries so far
        self.retry_at = 0.0
        self.wire: bytes | None = None  # the sealed batch, reused by retries
        self.base_sequence = -1
        self.last_error: BaseException | None = None
        self.order: float = -1  # its place among the partition's batches, given when it closes
        # the room in ``order`` up to the next batch's: a split batch's pieces take orders in
        # [order, order + span), so they keep their place among the partition's batches
        self.span = 1.0
        self.sent_on: Any = None  # in flight: the connection its request went out on (the sender's)

    @property
    def done(self) -> asyncio.Future[None]:
        """A future that resolves when the batch is done (``result.finished`` says so without one)."""
        return self.result.done

    @property
    def size(self) -> int:
        """Bytes of the (uncompressed) records section, or of the sealed batch."""
        return len(self.records) if self.records is not None else len(self.wire or b"")

    @property
    def count(self) -> int:
        """Records in the batch."""
        records = self.records
        return records.records_count if records is not None else self.sealed_count

    @property
    def reserved(self) -> int:
        """The buffer_memory bytes its records hold (given back when it is done)."""
        records = self.records
        return self.held + records.reserved if records is not None else self.held

    @reserved.setter
    def reserved(self, value: int) -> None:
        records = self.records
        self.held = value - records.reserved if records is not None else value

    @property
    def max_timestamp(self) -> int:
        """The latest record timestamp (ms), the base timestamp while the batch is empty."""
        records = self.records
        return records.max_timestamp if records is not None else self.sealed_max_timestamp

    def append(self, key: bytes | None, value: bytes | None, headers: bytes, timestamp: int) -> None:
        """Encode one record at the end of the records section (``headers`` pre-encoded)."""
        self.records.add_record(key, value, headers, timestamp)

    def extend(self, items: Sequence[Any], timestamp: int, future: asyncio.Future[Any] | None) -> None:
        """Encode a message set. Items: ``value`` (bytes or None), or a tuple ``(key, value)``,
        ``(key, value, headers)`` or ``(key, value, headers, timestamp_ms)``.

        All pieces are collected first and appended in one step, so a bad item leaves the
        batch as it was.
        """
        records = self.records
        first = records.records_count
        n = records.add_values(items, timestamp)  # the C encoder takes plain values and keys at once
        if n >= 0:
            if future is not None:  # _add_set, written out (once per set)
                sets = self.set_futures
                if sets:
                    sets.append((first, n, timestamp, future))  # type: ignore[union-attr]
                else:
                    self.set_futures = [(first, n, timestamp, future)]
            return
        vt = ZIGZAG
        size = _TABLE_SIZE
        od = first
        td0 = timestamp - self.base_timestamp
        tdb0 = vt[td0] if 0 <= td0 < size else encode_varint(td0)
        max_ts = records.max_timestamp
        default_used = False  # did any record take ``timestamp``?
        parts: list[bytes] = []
        add = parts.extend
        for item in items:
            odb = vt[od] if od < size else encode_varint(od)
            if type(item) is bytes:  # the fast path: a value, no key, no headers
                n = len(item)
                vl = vt[n] if n < size else encode_varint(n)
                n += 3 + len(tdb0) + len(odb) + len(vl)
                add((vt[n] if n < size else encode_varint(n), b"\x00", tdb0, odb, _NULL, vl, item, _NO_HEADERS))
                od += 1
                default_used = True
                continue
            if item is None or not isinstance(item, tuple):
                key, value, hdrs, tdb = None, item, _NO_HEADERS, tdb0
                default_used = True
            else:
                key, value = item[0], item[1]
                hdrs = encode_headers(item[2]) if len(item) > 2 else _NO_HEADERS
                if len(item) > 3 and item[3] is not None:
                    ts = item[3]
                    if ts > max_ts:
                        max_ts = ts
                    td = ts - self.base_timestamp
                    tdb = vt[td] if 0 <= td < size else encode_varint(td)
                else:
                    tdb = tdb0
                    default_used = True
            if key is None:
                kl, key = _NULL, b""
            else:
                n = len(key)
                kl = vt[n] if n < size else encode_varint(n)
            if value is None:
                vl, value = _NULL, b""
            else:
                n = len(value)
                vl = vt[n] if n < size else encode_varint(n)
            n = 1 + len(tdb) + len(odb) + len(kl) + len(key) + len(vl) + len(value) + len(hdrs)
            add((vt[n] if n < size else encode_varint(n), b"\x00", tdb, odb, kl, key, vl, value, hdrs))
            od += 1
        records.add_encoded(b"".join(parts), od - first, max(max_ts, timestamp) if default_used else max_ts)
        if future is not None:
            self._add_set(first, od - first, timestamp, future)

    def _add_set(self, first: int, count: int, timestamp: int, future: asyncio.Future[Any]) -> None:
        sets = self.set_futures
        if sets:
            sets.append((first, count, timestamp, future))  # type: ignore[union-attr]
        else:
            self.set_futures = [(first, count, timestamp, future)]

    def seal(self, compression: Compression, producer_id: int, producer_epoch: int, base_sequence: int,
             transactional: bool = False) -> bytes:
        """Compress, write the header, CRC once: the bytes a Produce request carries (with the
        transactional attribute, bit 4, for a transactional producer's batch)."""
        records = self.records
        assert records is not None and records.records_count > 0
        count = records.records_count
        max_timestamp = records.max_timestamp
        if compression is _UNCOMPRESSED:
            # the builder writes the header, the records and the crc into one bytes object
            wire = records.seal(_TRANSACTIONAL if transactional else 0, producer_id, producer_epoch,
                                base_sequence, crc32c)
        else:
            payload = compress(compression, bytes(records))
            # the header after the crc field, packed once: the crc covers it and then the records
            tail = _HEADER_TAIL.pack(
                _CODEC_BITS[compression] | (_TRANSACTIONAL if transactional else 0),  # attributes: codec; CreateTime; not control
                count - 1, self.base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)
            crc = crc32c(payload, crc32c(tail))
            # baseOffset 0 (the broker assigns it), partitionLeaderEpoch -1 (the broker's to set)
            wire = b"".join((_HEADER_HEAD.pack(0, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, _MAGIC, crc),
                             tail, payload))
        self.base_sequence = base_sequence
        self.wire = wire
        self.sealed_count = count
        self.sealed_max_timestamp = max_timestamp
        self.held += records.reserved
        self.records = None  # the sealed bytes are all a retry needs
        return wire

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """The sealed batch under a new producer epoch and sequence (after an epoch bump):
        patch producerId, producerEpoch and baseSequence and compute the CRC again; the
        records are untouched."""
        assert self.wire is not None
        wire = bytearray(self.wire)
        _PRODUCER_FIELDS.pack_into(wire, _PRODUCER_FIELDS_AT, producer_id, producer_epoch, base_sequence)
        struct.pack_into(">I", wire, 17, crc32c(memoryview(wire)[_CRC_START:]))
        self.wire = bytes(wire)
        self.base_sequence = base_sequence

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, records={self.count}, bytes={self.size})"


class PartitionQueue:
    """The batches of one partition not yet sent: the open one, and the closed ones ready to
    send (retries first, then new batches, oldest first). Batches in flight are the
    sender's (``pulllog.client.sender``); only the accumulator and the sender change these."""

    __slots__ = ("topic", "partition", "key", "open", "ready", "closed")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.open: ProducerBatch | None = None
        self.ready: deque[ProducerBatch] = deque()  # by order: retries first, then new batches
        self.closed = 0  # batches closed so far: the next one's order


class BufferPool:
    """``buffer_memory`` with first-come-first-served waiting when it runs out."""

    # slots: the producer's C send path (records.encoding.SendPath) reads and lowers
    # ``available`` and checks ``waiters`` is empty through them
    __slots__ = ("available", "total", "waiters")

    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total
        # reservations waiting for space, first come first served (send()'s fast path checks
        # it is empty before it takes space without calling in here)
        self.waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def used(self) -> int:
        return self.total - self.available

    def try_reserve(self, size: int) -> bool:
        if size <= self.available and not self.waiters:
            self.available -= size
            return True
        return False

    async def reserve(self, size: int, timeout_s: float) -> None:
        """Wait until ``size`` bytes are free; TimeoutError after ``timeout_s``."""
        if self.try_reserve(size):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self.waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(size)  # granted just as the wait ended: give it back
            else:
                future.cancel()
                try:
                    self.waiters.remove(entry)
                except ValueError:
                    pass
                self._grant()  # waiters behind this one may fit now
            raise

    def release(self, size: int) -> None:
        self.available += size
        if self.waiters:
            self._grant()

    def _grant(self) -> None:
        while self.waiters and self.waiters[0][0] <= self.available:
            size, future = self.waiters.popleft()
            if future.done():
                continue
            self.available -= size
            future.set_result(None)


class RecordAccumulator:
    """Per-partition queues of batches; see the module docstring for the states."""

    def __init__(self, *, batch_size: int, buffer_memory: int, loop: asyncio.AbstractEventLoop,
                 on_batch_closed: Callable[[str, int], None], wake: Callable[[], None]) -> None:
        self.batch_size = batch_size
        # append()'s bound for ``len(records) + reserved``: a record fits the open batch when
        # its records plus the record's estimate (``reserved`` less _OVERESTIMATE) stay
        # within batch_size
        self._room = batch_size + _OVERESTIMATE
        self.pool = BufferPool(buffer_memory)
        self.queues: dict[tuple[str, int], PartitionQueue] = {}
        # the queue append() used last: a producer usually sends to one partition many
        # times in a row, and comparing two fields is cheaper than a dict lookup by tuple
        # (the producer reads it too: the queue its record just went to)
        self.last: PartitionQueue = PartitionQueue("", -1)
        self.incomplete: set[ProducerBatch] = set()
        self.flushing = 0  # > 0 while someone waits in flush(): open batches are sendable now
        self._loop = loop
        # ProducerBatch and ProduceResult for a new batch: with the C extension, copies of a
        # template with the slots that differ set (what __init__ makes, without two Python
        # frames and some thirty stores per batch: a batch-1 producer makes one per record;
        # tests/client/test_producer_send_path.py checks they agree)
        self._make_result: Callable[..., ProduceResult] | None = None
        self._make_batch: Callable[..., ProducerBatch] | None = None
        if SlotsMaker is not None:
            self._make_result = SlotsMaker(ProduceResult("", -1, loop), ("topic", "partition"))
            self._make_batch = SlotsMaker(ProducerBatch("", -1, 0, 0.0, loop), (
                "topic", "partition", "records", "result", "base_timestamp", "sealed_max_timestamp", "created"))
        # (make_result, make_batch) for the producer's C send path, which opens batches as
        # new_batch does (None without the extension)
        self.makers = None if self._make_batch is None else (self._make_result, self._make_batch)
        self._on_batch_closed = on_batch_closed
        self._wake = wake
        # The sender's "this partition has all its batches in flight" (Sender.partition_busy):
        # a batch of such a partition cannot be sent before an answer, which wakes the sender
        # anyway, so it is not woken for it (a batch-1 producer would wake it per record).
        self.partition_busy: Callable[[tuple[str, int]], bool] = lambda key: False
        # partition_busy of the partition of the batch ``append``/``append_set`` opened last,
        # read when it was opened: the producer's yield rule reads it right after (nothing in
        # flight changes in between), so a batch-1 record asks the sender once, not twice
        self.opened_busy = False

    @property
    def room(self) -> int:
        """The bound ``append()`` checks ``len(records) + reserved`` against (the C send path's too)."""
        return self._room

    def queue(self, topic: str, partition: int) -> PartitionQueue:
        q = self.queues.get((topic, partition))
        if q is None:
            q = self.queues[(topic, partition)] = PartitionQueue(topic, partition)
        return q

    def _batch_for(self, q: PartitionQueue, size: int, timestamp: int) -> tuple[ProducerBatch, bool]:
        """The open batch if ``size`` more bytes fit, else a new one (the old one closes)."""
        batch = q.open
        if batch is not None:
            if batch.count == 0 or len(batch.records) + size <= self.batch_size:  # type: ignore[arg-type]
                return batch, False
            self.close(q)
        batch = q.open = self.new_batch(q.topic, q.partition, timestamp)
        self.incomplete.add(batch)
        busy = self.opened_busy = self.partition_busy(q.key)
        if not busy:
            self._wake()
        return batch, True

    def new_batch(self, topic: str, partition: int, base_timestamp: int) -> ProducerBatch:
        """``ProducerBatch(topic, partition, base_timestamp, now, loop)``, made faster where it can."""
        make = self._make_batch
        if make is None:
            return ProducerBatch(topic, partition, base_timestamp, time.monotonic(), self._loop)
        result = self._make_result(topic, partition)  # type: ignore[misc]
        return make(topic, partition, ProducerBatch.builder(base_timestamp, result, new_record_future), result,
                    base_timestamp, base_timestamp, time.monotonic())

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: bytes,
               timestamp: int, reserved: int, reroute: bool = False) -> RecordFuture | None:
        """Add one record and return its future; its ``relative_offset`` is 0 when it opened a batch.

        With ``reroute`` (the sticky partitioner chose this partition), a record that does
        not fit the open batch is not appended: the batch closes, which moves the sticky
        partitioner on, and None asks the caller to choose again. The record then starts
        the next batch where the partitioner now points instead of stranding alone in a new
        batch here (Kafka's ``abortOnNewBatch``).
        """
        q = self.last
        if q.partition != partition or q.topic != topic:
            q = self.last = self.queue(topic, partition)
        batch = q.open
        if batch is not None:
            # the common case, kept short: room in the open batch checked, the record
            # encoded and counted, its memory held and its future made in one call
            records = batch.records
            future = records.add(key, value, headers, timestamp, reserved, self._room)
            if future is not None:
                if len(records) >= self.batch_size:
                    self.close(q)
                return future  # type: ignore[no-any-return]
            if reroute:
                self.close(q)
                return None
        # _batch_for's work, written out: a record that opens a batch and fills it at once
        # (batch_size=1: every record) checks for the sender's wake-up once, when it closes
        if batch is not None and (batch.count == 0 or len(batch.records) + reserved - _OVERESTIMATE <= self.batch_size):
            new = False
        else:
            if batch is not None:
                self.close(q)
            batch = q.open = self.new_batch(q.topic, q.partition, timestamp)
            self.incomplete.add(batch)
            new = True
        records = batch.records
        delta = records.records_count
        try:
            records.add_record(key, value, headers, timestamp)
        except BaseException:
            self._drop_if_empty(q, batch)
            raise
        batch.held += reserved  # ``batch.reserved += reserved`` without the property's round trip
        if new:
            busy = self.opened_busy = self.partition_busy(q.key)
            if len(records) >= self.batch_size:
                self._close(q, busy)  # wakes the sender unless the partition's slots are all taken
            elif not busy:
                self._wake()
        elif len(records) >= self.batch_size:
            self.close(q)
        return new_record_future(batch.result, delta, timestamp)

    def append_set(self, topic: str, partition: int, items: Sequence[Any], timestamp: int,
                   future: asyncio.Future[Any] | None, reserved: int, reroute: bool = False) -> int:
        """Add a message set, contiguous within one batch; as ``append`` otherwise."""
        q = self.last
        if q.partition != partition or q.topic != topic:
            q = self.last = self.queue(topic, partition)
        size = reserved - _OVERESTIMATE * len(items)
        if reroute and q.open is not None and len(q.open.records) + size > self.batch_size:  # type: ignore[arg-type]
            self.close(q)
            return REROUTE
        batch, new = self._batch_for(q, size, timestamp)
        try:
            batch.extend(items, timestamp, future)
        except BaseException:
            self._drop_if_empty(q, batch)
            raise
        batch.held += reserved  # ``batch.reserved += reserved`` without the property's round trip
        if len(batch.records) >= self.batch_size:  # type: ignore[arg-type]
            if new:
                self._close(q, self.opened_busy)  # (nothing in flight changed since it opened)
            else:
                self.close(q)
        return NEW_BATCH if new else APPENDED

    def _drop_if_empty(self, q: PartitionQueue, batch: ProducerBatch) -> None:
        if batch.count == 0 and q.open is batch:
            q.open = None
            self.incomplete.discard(batch)
            batch.result.set_acknowledged(-1, -1)  # no records, nobody to tell

    def close(self, q: PartitionQueue) -> None:
        """The open batch takes no more records: queue it for sending."""
        if q.open is not None:
            self._close(q, self.partition_busy(q.key))

    def _close(self, q: PartitionQueue, busy: bool) -> None:
        """``close`` with the partition's ``partition_busy`` known: the sender is woken unless
        all of its in-flight slots are taken."""
        batch = q.open
        if batch is None:
            return
        q.open = None
        batch.order = q.closed
        q.closed += 1
        q.ready.append(batch)
        self._on_batch_closed(q.topic, q.partition)
        if not busy:
            self._wake()

    # ------------------------------------------------------------ the sender's API
    # The sender (pulllog.client.sender) moves batches through their states with these
    # calls only; it keeps the batches in flight itself.

    def partitions(self) -> list[PartitionQueue]:
        """Every partition's queue (a copy: sending may add queues)."""
        return list(self.queues.values())

    def next_ready(self, q: PartitionQueue, now: float, delivery_timeout: float,
                   expire: Callable[[ProducerBatch], None]) -> ProducerBatch | None:
        """The oldest closed batch of ``q`` (a retry first), or None; a batch created
        ``delivery_timeout`` seconds ago or more is taken out and handed to ``expire``."""
        ready = q.ready
        while ready:
            batch = ready[0]
            if batch.created + delivery_timeout > now:
                return batch
            ready.popleft()
            expire(batch)
        return None

    def has_ready(self, q: PartitionQueue) -> bool:
        return bool(q.ready)

    def open_batch(self, q: PartitionQueue) -> ProducerBatch | None:
        """``q``'s open batch if it holds records (it is sendable by linger or flush)."""
        batch = q.open
        return batch if batch is not None and batch.count else None

    def expire_open(self, q: PartitionQueue) -> ProducerBatch | None:
        """Take ``q``'s open batch out unsent (it expired); the caller fails it."""
        batch, q.open = q.open, None
        return batch

    def drain(self, q: PartitionQueue, batch: ProducerBatch) -> None:
        """The sender takes ``batch`` into a request: the head of ``q``'s ready batches, or
        ``q``'s open batch, which closes first (so it gets its order)."""
        if q.open is batch:
            self.close(q)
        taken = q.ready.popleft()
        assert taken is batch, "the sender drains a partition's batches in order"

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """A batch that failed retriably goes back into ``ready`` in its place by order,
        behind earlier batches that failed too, to be resent after ``retry_at``."""
        q = self.queue(batch.topic, batch.partition)
        batch.retry_at = retry_at
        batch.attempts += 1
        ready = q.ready
        if not ready or ready[0].order > batch.order:
            ready.appendleft(batch)  # the usual case: the oldest failed first
        else:
            _insert_by_order(ready, batch)

    def split(self, batch: ProducerBatch) -> list[ProducerBatch] | None:
        """``batch`` (sealed) was refused as too large (MESSAGE_TOO_LARGE): its records in two
        new batches, cut as near the middle as a message set allows (a set stays whole in one
        batch), which take its place, its order and its memory; None if it cannot be cut (one
        record, or one set). The caller seals and re-enqueues them (``reenqueue_split``).

        Halves rather than ``batch_size`` pieces: a topic's max.message.bytes may be far
        below batch_size, and a compressed batch's size is known only once sealed, so a piece
        still too large is refused again and cut again."""
        assert batch.wire is not None
        cuts = _cut_points(batch.count, batch.set_futures)
        if not cuts:
            return None
        middle = batch.count / 2
        cut = min(cuts, key=lambda c: abs(c - middle))
        records = RecordBatch.from_bytes(batch.wire, check_crc=False).records()
        sets = sorted(batch.set_futures, key=lambda s: s[0])
        pieces: list[ProducerBatch] = []
        for start, end in ((0, cut), (cut, batch.count)):
            base_timestamp = min(r.timestamp for r in records[start:end])  # deltas stay >= 0
            piece = ProducerBatch(batch.topic, batch.partition, base_timestamp, batch.created, self._loop)
            for record in records[start:end]:
                piece.append(record.key, record.value, encode_headers(record.headers), record.timestamp)
            piece.set_futures = [(f - start, n, ts, fut) for f, n, ts, fut in sets if start <= f < end]
            piece.reserved = batch.reserved * (end - start) // batch.count
            piece.attempts = batch.attempts
            piece.last_error = batch.last_error
            pieces.append(piece)
        pieces[-1].reserved += batch.reserved - sum(p.reserved for p in pieces)
        half = batch.span / 2
        pieces[0].order, pieces[1].order = batch.order, batch.order + half
        pieces[0].span = pieces[1].span = half
        batch.reserved = 0
        self.incomplete.discard(batch)
        self.incomplete.update(pieces)
        batch.result.split_into([(0, pieces[0].result), (cut, pieces[1].result)])
        return pieces

    def reenqueue_split(self, pieces: list[ProducerBatch]) -> None:
        """The pieces of a split batch go back into ``ready`` in its place, to be sent at once."""
        for piece in reversed(pieces):
            self.reenqueue(piece, 0.0)

    def earlier_ready(self, batch: ProducerBatch) -> bool:
        """Does an earlier batch of ``batch``'s partition wait in ``ready`` (for its retry)?"""
        q = self.queues.get((batch.topic, batch.partition))
        return q is not None and bool(q.ready) and q.ready[0].order < batch.order

    def waiting(self) -> Iterator[ProducerBatch]:
        """Every closed batch not in flight, each partition's in their order."""
        for q in list(self.queues.values()):
            yield from list(q.ready)

    def deallocate(self, batch: ProducerBatch) -> None:
        """The batch is done: free its memory (the caller then sets its outcome, batch.result)."""
        self.incomplete.discard(batch)
        records = batch.records
        if records is None:  # sealed (every batch answered): everything it holds is in ``held``
            pool = self.pool
            pool.available += batch.held  # pool.release(), written out
            if pool.waiters:
                pool._grant()
            batch.held = 0
        else:
            self.pool.release(batch.held + records.reserved)
            batch.held = -records.reserved

    def deallocate_all(self, batches: Iterable[ProducerBatch]) -> None:
        """``deallocate`` each of ``batches`` (a read's acknowledged batches), in one call."""
        discard = self.incomplete.discard
        freed = 0
        for batch in batches:
            discard(batch)
            records = batch.records
            if records is None:  # sealed: everything it holds is in ``held``
                freed += batch.held
                batch.held = 0
            else:
                freed += batch.held + records.reserved
                batch.held = -records.reserved
        pool = self.pool
        pool.available += freed  # pool.release(), written out
        if pool.waiters:
            pool._grant()

    def abort_unsent(self) -> list[ProducerBatch]:
        """Drop every batch not sent yet (open, ready, waiting for a retry) and return them,
        for the caller to fail: a transaction that failed or is aborted sends nothing more."""
        unsent: list[ProducerBatch] = []
        for q in self.queues.values():
            unsent.extend(q.ready)
            q.ready.clear()
            if q.open is not None:
                unsent.append(q.open)
                q.open = None
        return unsent

    def abort(self) -> list[ProducerBatch]:
        """Drop every unsent batch; return every incomplete one (the caller fails them)."""
        for q in self.queues.values():
            q.open = None
            q.ready.clear()
        return list(self.incomplete)


def _cut_points(count: int, set_futures: Sequence[tuple[int, int, int, asyncio.Future[Any]]]) -> list[int]:
    """Where a batch of ``count`` records may be cut: between records, never inside a set."""
    inside: set[int] = set()
    for first, n, _ts, _future in set_futures:
        inside.update(range(first + 1, first + n))
    return [c for c in range(1, count) if c not in inside]


def _insert_by_order(batches: list[ProducerBatch] | deque[ProducerBatch], batch: ProducerBatch) -> None:
    for i, other in enumerate(batches):
        if other.order > batch.order:
            batches.insert(i, batch)
            return
    batches.append(batch)
