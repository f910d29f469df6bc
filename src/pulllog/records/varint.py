"""Kafka's varints, the one implementation: zigzag (records) and unsigned (flexible versions).

Both are 7 bits a byte, least significant group first, the high bit set on every byte but
the last.

- Signed zigzag varints (Kafka's ``ByteUtils.writeVarint`` / ``writeVarlong``) are what records
  and record headers use: ``(v << 1) ^ (v >> 63)``, then the groups. Kafka's varlong is 64 bits,
  so a valid encoding has at most 10 bytes and its tenth byte holds only bit 63.
- Unsigned varints (``ByteUtils.readUnsignedVarint``) are what flexible protocol versions
  (KIP-482) use for compact lengths and counts (N + 1, 0 meaning null) and tag buffers. Kafka
  reads at most 5 bytes (32 bits), and so does :func:`read_uvarint`.

Every reader raises :class:`VarintError` (a ``ValueError``) on bytes that are not a valid
varint, and each layer turns it into its own error where it hands the bytes over: ``records``
into ``InvalidRecordError``, ``net`` into ``MalformedError``.

Hot loops (the Python record decoder, the producer's record encoder, the Produce request
decoder) inline the one- and two-byte cases or look sizes up in :data:`ZIGZAG`, because a
function call per field costs as much as the field; each such copy names the function here that
it stands for, and tests/records/test_varint.py checks that they agree.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ZIGZAG",
    "ZIGZAG_TABLE_SIZE",
    "VarintError",
    "decode_varint",
    "encode_uvarint",
    "encode_varint",
    "read_uvarint",
    "write_uvarint",
    "write_varint",
]


class VarintError(ValueError):
    """The bytes are not a valid varint, or it runs past the end; the message says where."""


# ------------------------------------------------------------------ signed (zigzag) varints


def _encode_zigzag(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


ZIGZAG_TABLE_SIZE: Final = 1 << 14

ZIGZAG: tuple[bytes, ...]
"""``ZIGZAG[n]`` is ``encode_varint(n)`` for ``0 <= n < ZIGZAG_TABLE_SIZE``: record sizes,
offset deltas and lengths, looked up by the encoders' hot loops instead of computed. Built on
first use (see :func:`__getattr__`): building it costs about 10 ms, and ``pulllog serve``
imports this module before it listens but needs the table only when it encodes records."""


def __getattr__(name: str) -> tuple[bytes, ...]:
    """Build :data:`ZIGZAG` when it is first asked for (``from .varint import ZIGZAG`` too)."""
    if name != "ZIGZAG":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    table = tuple(_encode_zigzag(n) for n in range(ZIGZAG_TABLE_SIZE))
    globals()["ZIGZAG"] = table
    return table


def encode_varint(value: int) -> bytes:
    """Zigzag varint (signed, as Kafka's ByteUtils.writeVarint / writeVarlong)."""
    if 0 <= value < ZIGZAG_TABLE_SIZE:
        try:
            return ZIGZAG[value]
        except NameError:  # the table is not built yet; costs nothing once it is
            return __getattr__("ZIGZAG")[value]
    return _encode_zigzag(value)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint to ``out`` (the encoders' hot path: no bytes object per field)."""
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; return (value, new position)."""
    result = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise VarintError("varint runs past the end of the buffer") from None
        pos += 1
        if shift == 63 and b & 0x7F > 1:  # Kafka's varlong is 64 bits: a tenth byte holds only bit 63
            raise VarintError("varint does not fit in 64 bits")
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise VarintError("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


# ------------------------------------------------------------------ unsigned varints


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint (Kafka's ByteUtils.writeUnsignedVarint), e.g. a compact length N + 1."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def write_uvarint(out: bytearray, value: int) -> None:
    """Append an unsigned varint to ``out``."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _truncated(position: int, need: int, end: int) -> VarintError:
    return VarintError(f"varint at byte {position} needs {need} bytes but only {end - position} remain")


def read_uvarint(buffer: bytes | bytearray | memoryview, position: int, end: int) -> tuple[int, int]:
    """Kafka's unsigned varint (at most 5 bytes) in ``buffer[position:end]`` -> (value, next position)."""
    if position >= end:
        raise _truncated(position, 1, end)
    byte = buffer[position]
    if byte < 0x80:  # one byte: nearly every length and count on the wire
        return byte, position + 1
    start = position
    value = byte & 0x7F
    shift = 7
    position += 1
    while True:
        if position >= end:
            raise _truncated(start, position - start + 1, end)
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise VarintError(f"varint at byte {start} is longer than 5 bytes")
