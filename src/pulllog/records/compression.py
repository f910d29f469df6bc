"""Record batch compression, byte-compatible with what Kafka clients send and expect.

The codec id lives in bits 0-2 of a batch's attributes:

    0 none   1 gzip   2 snappy   3 lz4   4 zstd

Framing rules the clients rely on (each has broken a Kafka-compatible broker before):

* gzip: a plain RFC 1952 gzip member.
* snappy: the Java client writes xerial ``SnappyOutputStream`` framing (magic
  ``\\x82SNAPPY\\x00``, version and compatible-version int32s, then blocks of
  ``int32 length + raw snappy``); librdkafka may send raw snappy. We decode both and write
  xerial framing, which every client (Java, librdkafka, kafka-python, aiokafka) reads.
* lz4: the LZ4 *frame* format (magic 2 fixed the old broken header checksum). The Java
  client's ``KafkaLZ4BlockInputStream`` only supports independent blocks, so we never emit
  linked blocks.
* zstd: a standard zstd frame.

All codecs come from cramjam (one maintained Rust library) rather than four bindings.
"""

from __future__ import annotations

import enum
import struct

import cramjam

__all__ = ["Compression", "compress", "decompress", "CompressionError"]


class CompressionError(ValueError):
    """A compressed batch payload could not be decoded."""


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | "Compression" | None) -> "Compression":
        """Accept Kafka's config spelling (``compression.type=lz4``) or an id."""
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        key = name.strip().upper()
        if key in ("", "UNCOMPRESSED", "PRODUCER"):
            return cls.NONE
        try:
            return cls[key]
        except KeyError:
            choices = ", ".join(c.name.lower() for c in cls)
            raise ValueError(f"unknown compression {name!r}; use one of {choices}") from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")


def _snappy_xerial_encode(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decode(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("snappy: truncated xerial block length")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CompressionError("snappy: xerial block runs past the end of the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)


def _lz4_encode(data: bytes) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def compress(codec: Compression | int, data: bytes) -> bytes:
    codec = Compression(codec)
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _snappy_xerial_encode(data)
    if codec is Compression.LZ4:
        return _lz4_encode(data)
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise CompressionError(f"unknown compression codec id {int(codec)}")


def decompress(codec: Compression | int, data: bytes) -> bytes:
    try:
        codec = Compression(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {int(codec)}") from None
    try:
        if codec is Compression.NONE:
            return data
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is Compression.SNAPPY:
            return _snappy_decode(data)
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec is Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CompressionError(f"{codec.name.lower()}: {exc}") from None
    raise CompressionError(f"unknown compression codec id {int(codec)}")
