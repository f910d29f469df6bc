"""Kafka's framing: a 4-byte big-endian signed size, then exactly that many bytes.

::

    +----------------+---------------------------------------+
    | size: int32 BE | payload: `size` bytes (header + body) |
    +----------------+---------------------------------------+

Rules, as Apache Kafka's ``NetworkReceive`` keeps them:

- The size counts the payload only, never the 4 prefix bytes.
- A negative size is a protocol violation. A size above ``socket.request.max.bytes``
  (default 104857600) is refused as soon as the prefix arrives, before buffering a
  byte of the payload, so a hostile or confused peer cannot make us allocate it.
  Either way the frame boundary is lost: the caller logs and closes the connection.
- A size of zero is a well-formed (empty) frame; deciding it is not a request is the
  header decoder's job.
- Partial frames are not errors: bytes wait in the decoder until the rest arrives.

A non-Kafka client on the Kafka port (TLS, HTTP) almost always shows up as an absurd
size (``"GET "`` reads as 1195725856), so the error message says so when it can.
"""

from __future__ import annotations

import struct
from typing import Final

from .errors import FrameError, FrameTooLargeError, NegativeFrameSizeError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "frame",
]

DEFAULT_MAX_FRAME_SIZE: Final = 104_857_600
"""Kafka's ``socket.request.max.bytes`` default (100 MiB)."""

_SIZE: Final = struct.Struct(">i")


def frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix: one whole frame."""
    return _SIZE.pack(len(payload)) + payload


def peer_hint(prefix: bytes) -> str:
    """A hint for the log line when the peer is clearly not a Kafka client."""
    if prefix[:1] == b"\x16" and prefix[1:2] == b"\x03":
        return " (this looks like a TLS handshake: is the client configured for SSL?)"
    if prefix[:4] in (b"GET ", b"POST", b"PUT ", b"HEAD", b"HTTP"):
        return " (this looks like HTTP: is this the Kafka port?)"
    return ""


class FrameDecoder:
    """Bytes in, whole frames (payload only, prefix stripped) out.

    >>> decoder = FrameDecoder()
    >>> decoder.feed(b"\\x00\\x00\\x00\\x02a")
    []
    >>> decoder.feed(b"b\\x00\\x00")
    [b'ab']

    After a :class:`~pulllog.net.errors.FrameError` the stream is unusable; every
    further ``feed`` raises the same error.
    """

    __slots__ = ("_buffer", "_error", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` to the stream; return every frame it completes, in order."""
        if self._error is not None:
            raise self._error
        buffer: bytes | bytearray | memoryview
        if self._buffer:
            self._buffer += data
            buffer = self._buffer
        else:
            # Common case on a request/response connection: the buffer is empty and
            # `data` holds whole frames. Slice them out of `data` without a copy
            # into the buffer first.
            buffer = data
        frames: list[bytes] = []
        position = 0
        available = len(buffer)
        max_size = self.max_frame_size
        while available - position >= 4:
            (size,) = _SIZE.unpack_from(buffer, position)
            if size < 0 or size > max_size:
                self._error = self._frame_error(size, bytes(buffer[position : position + 8]))
                raise self._error
            end = position + 4 + size
            if end > available:
                break
            frames.append(bytes(buffer[position + 4 : end]))
            position = end
        if buffer is self._buffer:
            del self._buffer[:position]
        elif position < available:
            self._buffer = bytearray(buffer[position:])
        return frames

    def _frame_error(self, size: int, prefix: bytes) -> FrameError:
        hint = peer_hint(prefix)
        if size < 0:
            return NegativeFrameSizeError(
                f"invalid request frame size {size}: the stream is corrupt{hint}; "
                "closing the connection",
                size=size,
            )
        return FrameTooLargeError(
            f"request frame of {size} bytes exceeds socket.request.max.bytes="
            f"{self.max_frame_size}{hint}; closing the connection "
            "(raise socket.request.max.bytes if the client is legitimate)",
            size=size,
            max_size=self.max_frame_size,
        )
