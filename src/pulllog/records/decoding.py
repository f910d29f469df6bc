"""A batch's records section decoded into record objects: the consumer's hot loop.

The consumer (:mod:`pulllog.client.completed_fetch`) and the Spark reader
(:mod:`pulllog.spark.columns`, which moves the records into Arrow columns) both use it.

``decode_records`` is the one place that chooses the implementation:

- the C extension :mod:`pulllog.records._crecords` (``_crecords.c``), built by ``pip install``
  where a C compiler is found, about six times faster (the consumer spends most of its
  CPU here: 200-byte records arrive by the million per second);
- else the pure-Python decoder below, which the C one must match exactly, result for
  result and error for error (``tests/log/test_decoding.py`` checks both on random and on
  damaged batches). ``PULLLOG_NO_EXTENSIONS=1`` in the environment forces it.

``IMPLEMENTATION`` says which one is in use ("c" or "python").

The contract both keep: ``decode_records(record_type, data, pos, end, count, base_offset,
base_timestamp, timestamp_type, log_append_time, topic, partition)`` decodes ``count``
records from ``data[pos:end]`` (uncompressed record bytes, layout in
:mod:`pulllog.records.batch`) into ``record_type`` objects, a dataclass with slots named
topic, partition, offset, timestamp, timestamp_type, key, value, headers (the client's
``ConsumerRecord``). A record is allocated bare and its slots are set through their
descriptors: a frozen dataclass's ``__init__`` sets each field through
``object.__setattr__`` (about 1.2 us for 8 fields, as long as the rest of the decoding),
the descriptors take about 0.35 us, and the objects are the very same. With
``timestamp_type`` 1 (LogAppendTime) every record's timestamp is ``log_append_time``.
Malformed bytes raise :class:`~pulllog.records.batch.CorruptRecordError`; nothing is read
outside ``data[pos:end]`` (the Python decoder may look further, but only to fail).
Lengths below zero mean null for keys and values, as in Kafka; a header key may not be
null and a record may not have a negative number of headers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from .errors import CorruptRecordError, InvalidRecordError
from .extensions import extensions_disabled
from .varint import VarintError, decode_varint

__all__ = ["IMPLEMENTATION", "DecodedRecord", "decode_records", "py_decode_records"]

_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")


@dataclass(slots=True)
class DecodedRecord:
    """The plain record shape of the contract above, for readers inside the broker (the log
    cleaner, the offsets-topic replay) that need no client-facing record type."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Any


@cache
def _setters(record_type: type) -> tuple[Callable[[Any, Any], None], ...]:
    return tuple(getattr(record_type, name).__set__ for name in _FIELDS)


def py_decode_records(record_type: type, data: bytes, pos: int, end: int, count: int, base_offset: int,
                      base_timestamp: int, timestamp_type: int, log_append_time: int, topic: str,
                      partition: int) -> list[Any]:
    """The pure-Python decoder (see the module docstring for the contract).

    One function with the one- and two-byte cases of :func:`.varint.decode_varint` written out
    (longer ones call it), because a function call per field costs as much as decoding it;
    tests/records/test_varint.py checks that they agree.
    """
    try:
        return _py_decode(record_type, data, pos, end, count, base_offset, base_timestamp, timestamp_type,
                          log_append_time, topic, partition)
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the buffer") from None
    except (InvalidRecordError, VarintError) as exc:
        if type(exc) is CorruptRecordError:
            raise
        raise CorruptRecordError(str(exc)) from None


def _py_decode(record_type: type, data: bytes, pos: int, end: int, count: int, base_offset: int,
               base_timestamp: int, timestamp_type: int, log_append_time: int, topic: str,
               partition: int) -> list[Any]:
    out: list[Any] = []
    append = out.append
    new = object.__new__
    cls = record_type
    varint = decode_varint  # the slow path: 3 bytes and more
    set_topic, set_partition, set_offset, set_timestamp, set_timestamp_type, set_key, set_value, set_headers = (
        _setters(record_type))
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    for _ in range(count):
        # length
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = varint(data, pos)
        record_end = pos + length
        pos += 1  # record attributes: unused
        # timestampDelta
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                ts_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                ts_delta, pos = varint(data, pos)
        # offsetDelta
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                offset_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                offset_delta, pos = varint(data, pos)
        # key
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                n = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                n, pos = varint(data, pos)
        if n >= 0:
            key: bytes | None = data[pos:pos + n]
            pos += n
        else:
            key = None
        # value
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                n = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                n, pos = varint(data, pos)
        if n >= 0:
            value: bytes | None = data[pos:pos + n]
            pos += n
        else:
            value = None
        # headers
        b = data[pos]
        if b == 0:
            headers = no_headers
            pos += 1
        else:
            n, pos = varint(data, pos)
            if n < 0:
                raise CorruptRecordError("a record has a negative number of headers")
            items = []
            for _h in range(n):
                hn, pos = varint(data, pos)
                if hn < 0:
                    raise CorruptRecordError("a record header key is null")
                hkey = data[pos:pos + hn].decode("utf-8", "replace")
                pos += hn
                hn, pos = varint(data, pos)
                if hn >= 0:
                    hvalue: bytes | None = data[pos:pos + hn]
                    pos += hn
                else:
                    hvalue = None
                items.append((hkey, hvalue))
            headers = tuple(items)
        if pos != record_end:
            raise CorruptRecordError(f"a record declared {length} bytes but its fields took {length + pos - record_end}")
        r = new(cls)
        set_topic(r, topic)
        set_partition(r, partition)
        set_offset(r, base_offset + offset_delta)
        set_timestamp(r, log_append_time if timestamp_type else base_timestamp + ts_delta)
        set_timestamp_type(r, timestamp_type)
        set_key(r, key)
        set_value(r, value)
        set_headers(r, headers)
        append(r)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after {count} records")
    return out


def _choose() -> tuple[str, Callable[..., list[Any]]]:
    if extensions_disabled():
        return "python", py_decode_records
    try:
        from ._crecords import decode_records as c_decode_records
    except ImportError:  # not built (no C compiler when installed): the pure-Python decoder does it all
        return "python", py_decode_records
    return "c", c_decode_records


IMPLEMENTATION, decode_records = _choose()
