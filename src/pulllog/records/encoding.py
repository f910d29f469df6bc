"""Records encoded into a batch's records section: the producer's hot loop.

The producer's batches (:class:`pulllog.client.accumulator.ProducerBatch`) append each record
to a ``bytearray`` in the RecordBatch v2 record layout (:mod:`pulllog.records.batch`), with
attributes 0; the header, compression and CRC-32C come later, once per batch (``seal``).

This module is the one place that chooses the implementation:

- the C extension :mod:`pulllog.records._crecords` (``_crecords.c``, its encoding section),
  built by ``pip install`` where a C compiler is found;
- else the pure-Python encoder (:func:`py_append_record`, and the accumulator's general
  message-set loop). ``PULLLOG_NO_EXTENSIONS=1`` in the environment forces it.

``IMPLEMENTATION`` says which one is in use ("c" or "python"). The contract both keep:

- ``append_record(records, offset_delta, timestamp_delta, key, value, headers)`` appends one
  record; key and value are None (null) or bytes-like, ``headers`` the encoded headers part
  (bytes, ``b"\\x00"`` for none). A key or value that is not bytes-like raises TypeError and
  leaves ``records`` as it was.
- ``append_values(records, items, offset_delta, timestamp_delta)`` (None without the
  extension) appends a message set whose items are all simple: a value (bytes or None), or a
  tuple ``(key, value)`` of bytes or None, optionally followed by None headers and a None
  timestamp. It returns how many it appended, or -1, appending nothing, when an item is not
  simple; the caller then encodes the set with the general loop.

Both produce exactly the bytes of the pure-Python encoder; ``tests/records/test_encoding.py``
checks it on random records and message sets, for every codec once sealed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .varint import ZIGZAG, ZIGZAG_TABLE_SIZE, encode_varint

__all__ = ["IMPLEMENTATION", "append_record", "append_values", "py_append_record"]

_NULL = b"\x01"  # varint(-1): a null key or value


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


def _choose() -> tuple[str, Callable[..., None], Callable[[bytearray, Sequence[Any], int, int], int] | None]:
    if os.environ.get("PULLLOG_NO_EXTENSIONS", "") not in ("", "0"):
        return "python", py_append_record, None
    try:
        from ._crecords import append_record as c_append_record
        from ._crecords import append_values as c_append_values
    except ImportError:  # not built (no C compiler when installed), or an older build without the encoder
        return "python", py_append_record, None
    return "c", c_append_record, c_append_values


IMPLEMENTATION, append_record, append_values = _choose()
