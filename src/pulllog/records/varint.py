"""Kafka's zigzag varints (ByteUtils.writeVarint / writeVarlong), the one implementation.

Records and record headers use signed zigzag varints: ``(v << 1) ^ (v >> 63)``, then 7 bits
a byte, least significant group first, the high bit set on every byte but the last. Kafka's
varlong is 64 bits, so a valid encoding has at most 10 bytes and its tenth byte holds only
bit 63. Decoding rejects anything longer or wider with :class:`InvalidRecordError`.
"""

from __future__ import annotations

from .errors import InvalidRecordError

__all__ = ["decode_varint", "encode_varint", "write_varint"]


def encode_varint(value: int) -> bytes:
    """Zigzag varint (signed, as Kafka's ByteUtils.writeVarint / writeVarlong)."""
    v = (value << 1) ^ (value >> 63)
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


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
            raise InvalidRecordError("varint runs past the end of the buffer") from None
        pos += 1
        if shift == 63 and b & 0x7F > 1:  # Kafka's varlong is 64 bits: a tenth byte holds only bit 63
            raise InvalidRecordError("varint does not fit in 64 bits")
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos
