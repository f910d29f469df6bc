"""Records encoded into a batch's records section: the producer's hot loop.

The producer's batches (:class:`pulllog.client.accumulator.ProducerBatch`) append each record
to a ``bytearray`` in the RecordBatch v2 record layout (:mod:`pulllog.records.batch`), with
attributes 0; the header, compression and CRC-32C come later, once per batch (``seal``).

This module is the one place that chooses the implementation:

- the C extension :mod:`pulllog.records._crecords` (``_crecords.c``, its encoding section),
  built by ``pip install`` where a C compiler is found;
- else the pure-Python encoder (:func:`py_append_record`, :class:`PyRecordsBuilder`, and the
  accumulator's general message-set loop). ``PULLLOG_NO_EXTENSIONS=1`` in the environment
  forces it.

``IMPLEMENTATION`` says which one is in use ("c" or "python"). The contract both keep:

- ``RecordsBuilder(base_timestamp)`` is a batch's records section while it is built: a
  ``bytearray`` (``len``, ``bytes``, ``memoryview`` are the bytearray's) that also keeps
  ``records_count`` (records so far; ``count`` is the bytearray's method), ``base_timestamp`` and ``max_timestamp`` (the latest record's,
  the base while empty), so adding a record is one call on the producer's per-record path:

  - ``add_record(key, value, headers, timestamp, reserved=0, room=-1)`` appends one record
    at offset delta ``records_count`` and returns that delta; with ``room`` >= 0 and records already
    in, it appends nothing and returns -1 when ``len + reserved > room`` (the caller's
    estimate against its bound: the accumulator's batch_size rule, the same in both);
  - ``add_values(items, timestamp)``: ``append_values`` at the builder's next offset delta
    (-1, nothing appended, when an item is not simple; always -1 in Python, whose caller then
    runs its general loop);
  - ``add_encoded(data, n, max_timestamp)``: ``n`` records encoded by that general loop;
  - ``add(key, value, headers, timestamp, reserved, room)``: ``add_record`` with room, then
    ``reserved`` added to ``self.reserved`` and ``make_future(result, offset delta, timestamp)``
    returned, or None (nothing appended) without room: the producer's whole per-record step,
    ``result`` and ``make_future`` being the optional constructor arguments after
    ``base_timestamp``;
  - ``seal(attributes, producer_id, producer_epoch, base_sequence, crc32c)``: the whole
    uncompressed RecordBatch v2 (baseOffset 0, partitionLeaderEpoch -1, magic 2, the
    builder's count and timestamps, the CRC-32C that ``crc32c`` computes) as one bytes
    object: in C one allocation and one copy of the records, where the Python packs and
    joins the pieces.

- ``append_record(records, offset_delta, timestamp_delta, key, value, headers)`` appends one
  record; key and value are None (null) or bytes-like, ``headers`` the encoded headers part
  (bytes, ``b"\\x00"`` for none). A key or value that is not bytes-like raises TypeError and
  leaves ``records`` as it was.
- ``append_values(records, items, offset_delta, timestamp_delta)`` (None without the
  extension) appends a message set whose items are all simple: a value (bytes or None), or a
  tuple ``(key, value)`` of bytes or None, optionally followed by None headers and a None
  timestamp. It returns how many it appended, or -1, appending nothing, when an item is not
  simple; the caller then encodes the set with the general loop.

``values_size(items)`` (None without the extension) adds up the keys and values of a message
set of simple items (plus one per tuple of three or four, for its None headers), -1 if an item
is not simple: ``send_batch()``'s buffer estimate of a set in one call.

``now_ms()`` is ``time.time_ns() // 1_000_000`` (the same clock), in C where the extension is
built: a record's default timestamp without a big-int division per ``send()``.

``SlotsMaker`` (None without the extension) is the C module's fast constructor for a class of
__slots__: ``SlotsMaker(template, names)(*values)`` is a copy of ``template`` with the slots
``names`` set to ``values``, which is what the producer needs once per ``send()`` (a
``RecordFuture``, without running its ``__init__``).

``ready(value)`` is an awaitable whose ``await`` gives ``value`` at once: in C an object with
no coroutine, frame or StopIteration behind it (``await`` on an ``async def`` costs about a
microsecond, as much as appending the record), in Python a coroutine that returns it. The
producer's ``send()`` returns one when the record is appended without waiting.

``SendPath`` (None without the extension) is a producer's ``send()`` for its common case in C
(a record for the partition it appended to last, room in that partition's open batch, no
headers, buffer space free, no one waiting for it): ``SendPath(fallback, pool, close,
queue_type, batch_type, batch_size, room, max_record_size, plain_size)`` is called as
``send()`` is and either appends the record to the open batch's C ``RecordsBuilder`` (what
``add()`` does, the pool's ``available`` lowered, ``close(queue)`` at ``batch_size``) and
returns ``ready(future)``, or calls ``fallback``, the Python ``send()``, with the same
arguments, having changed nothing. ``arm(queue, topic, partition, sticky)`` names the
partition and ``disarm()`` stops it; the rules are at the SendPath section of ``_crecords.c``.
``SetPath`` (None without the extension) is the same for ``send_batch()``: ``SetPath(path,
fallback, new_future, record_overhead)`` takes a message set of simple items for the partition
``path`` (a SendPath) is armed for when that partition has no open batch (a batch_size=1
producer's every set), opens the batch with the set in it as ``path`` opens one for a record,
and returns ``ready(future)`` of the set's future; anything else calls ``fallback``, the
Python ``send_batch()``. There is no Python twin: without it every call is the Python ``send()``
(``pulllog.client.producer``), and tests/client/test_producer_send_path.py checks that both
ways give the same batches, futures and memory accounting.

Both produce exactly the bytes of the pure-Python encoder; ``tests/records/test_encoding.py``
checks it on random records and message sets, for every codec once sealed.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .extensions import extensions_disabled
from .varint import ZIGZAG, ZIGZAG_TABLE_SIZE, encode_varint

__all__ = ["IMPLEMENTATION", "PyRecordsBuilder", "RecordsBuilder", "SendPath", "SetPath", "SlotsMaker", "append_record",
           "append_values", "now_ms", "py_append_record", "py_ready", "ready", "values_size"]

_NULL = b"\x01"  # varint(-1): a null key or value
# a RecordBatch v2 header (records/batch.py): up to the crc, and after it (what the crc covers)
_HEADER_HEAD = struct.Struct(">qiibI")
_HEADER_TAIL = struct.Struct(">hiqqqhii")
_T = TypeVar("_T")


def py_append_record(records: bytearray, offset_delta: int, timestamp_delta: int, key: Any, value: Any,
                     headers: bytes) -> None:
    """The pure-Python ``append_record`` (see the module docstring)."""
    # Small sizes and deltas come from records.varint's ZIGZAG table (a call to
    # encode_varint per field would cost as much as the field), and the record is one
    # bytes.join of ready-made pieces: join() checks every piece is bytes-like before
    # ``records`` is touched.
    vt = ZIGZAG
    size = ZIGZAG_TABLE_SIZE
    td = timestamp_delta
    tdb = vt[td] if 0 <= td < size else encode_varint(td)
    odb = vt[offset_delta] if 0 <= offset_delta < size else encode_varint(offset_delta)
    if value is None:
        vl, value, lv = _NULL, b"", 0
    else:
        lv = len(value)
        vl = vt[lv] if lv < size else encode_varint(lv)
    if key is None:
        n = 2 + len(tdb) + len(odb) + len(vl) + lv + len(headers)
        records += b"".join((vt[n] if n < size else encode_varint(n), b"\x00", tdb, odb, _NULL, vl, value, headers))
    else:
        lk = len(key)
        kl = vt[lk] if lk < size else encode_varint(lk)
        n = 1 + len(tdb) + len(odb) + len(kl) + lk + len(vl) + lv + len(headers)
        records += b"".join((vt[n] if n < size else encode_varint(n), b"\x00", tdb, odb, kl, key, vl, value,
                             headers))


class PyRecordsBuilder(bytearray):
    """The pure-Python ``RecordsBuilder`` (see the module docstring)."""

    __slots__ = ("base_timestamp", "make_future", "max_timestamp", "records_count", "reserved", "result")

    def __init__(self, base_timestamp: int, result: Any = None, make_future: Any = None) -> None:
        super().__init__()
        self.records_count = 0
        self.base_timestamp = base_timestamp
        self.max_timestamp = base_timestamp
        self.reserved = 0
        self.result = result
        self.make_future = make_future

    def add(self, key: Any, value: Any, headers: bytes, timestamp: int, reserved: int, room: int) -> Any:
        delta = self.add_record(key, value, headers, timestamp, reserved, room)
        if delta < 0:
            return None
        self.reserved += reserved
        return self.make_future(self.result, delta, timestamp)

    def add_record(self, key: Any, value: Any, headers: bytes, timestamp: int, reserved: int = 0,
                   room: int = -1) -> int:
        od = self.records_count
        if room >= 0 and od and len(self) + reserved > room:
            return -1
        py_append_record(self, od, timestamp - self.base_timestamp, key, value, headers)
        self.records_count = od + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return od

    def add_values(self, items: Sequence[Any], timestamp: int) -> int:
        return -1  # no one-call path in Python: the caller's general loop encodes the set

    def add_encoded(self, data: bytes, n: int, max_timestamp: int) -> None:
        self.extend(data)
        self.records_count += n
        if n and max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp

    def seal(self, attributes: int, producer_id: int, producer_epoch: int, base_sequence: int,
             crc32c: Callable[..., int]) -> bytes:
        count = self.records_count
        if count <= 0:
            raise ValueError("seal(): no records, or more than a batch can hold")
        tail = _HEADER_TAIL.pack(attributes, count - 1, self.base_timestamp, self.max_timestamp, producer_id,
                                 producer_epoch, base_sequence, count)
        crc = crc32c(self, crc32c(tail))
        return b"".join((_HEADER_HEAD.pack(0, 49 + len(self), -1, 2, crc), tail, self))


def py_now_ms() -> int:
    """The pure-Python ``now_ms``."""
    return time.time_ns() // 1_000_000


async def py_ready(value: _T) -> _T:
    """The pure-Python ``ready``: a coroutine that returns ``value``."""
    return value


def _choose() -> tuple[str, type[Any], Callable[..., None], Callable[[bytearray, Sequence[Any], int, int], int] | None,
                       Any, Callable[[Sequence[Any]], int] | None, Callable[[], int], Callable[[Any], Awaitable[Any]],
                       Any, Any]:
    if extensions_disabled():
        return "python", PyRecordsBuilder, py_append_record, None, None, None, py_now_ms, py_ready, None, None
    try:
        from ._crecords import Ready as CReady
        from ._crecords import RecordsBuilder as CRecordsBuilder
        from ._crecords import SendPath as CSendPath
        from ._crecords import SetPath as CSetPath
        from ._crecords import SlotsMaker as CSlotsMaker
        from ._crecords import append_record as c_append_record
        from ._crecords import append_values as c_append_values
        from ._crecords import now_ms as c_now_ms
        from ._crecords import values_size as c_values_size
    except ImportError:  # not built (no C compiler when installed), or an older build without the encoder
        return "python", PyRecordsBuilder, py_append_record, None, None, None, py_now_ms, py_ready, None, None
    return ("c", CRecordsBuilder, c_append_record, c_append_values, CSlotsMaker, c_values_size, c_now_ms, CReady,
            CSendPath, CSetPath)


(IMPLEMENTATION, RecordsBuilder, append_record, append_values, SlotsMaker, values_size, now_ms, ready,
 SendPath, SetPath) = _choose()
