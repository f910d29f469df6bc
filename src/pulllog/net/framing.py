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
    "frame_error",
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

    __slots__ = ("_chunks", "_error", "_have", "_head", "_size", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        # A frame split over reads: its payload's pieces (``_chunks``, ``_have`` bytes of
        # ``_size``) are joined once, when the last one arrives, so a 1 MiB Produce read in
        # 256 KiB pieces is copied once into its frame; growing a buffer by each piece and
        # slicing the frame out of it copied it three times and cost ~2 ms of CPU a frame.
        self._size = -1  # the payload size of the frame in progress; -1: none
        self._chunks: list[bytes] = []
        self._have = 0
        self._head = b""  # the first 1-3 bytes of a size prefix
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._head) + (4 + self._have if self._size >= 0 else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` to the stream; return every frame it completes, in order."""
        if self._error is not None:
            raise self._error
        frames: list[bytes] = []
        # Slicing bytes copies once, as bytes() of a memoryview slice does; the common case
        # (whole frames in a bytes read, nothing pending) skips making the view.
        buffer: bytes | memoryview = data if type(data) is bytes else memoryview(data)
        if self._size >= 0:  # the rest of a frame's payload first
            view = memoryview(buffer)
            need = self._size - self._have
            if len(view) < need:
                self._chunks.append(bytes(view))
                self._have += len(view)
                return frames
            self._chunks.append(bytes(view[:need]))
            frames.append(b"".join(self._chunks))
            self._size, self._chunks, self._have = -1, [], 0
            buffer = view[need:]
        elif self._head:
            buffer = self._head + bytes(buffer)  # rare: a size prefix split over reads
            self._head = b""
        position = 0
        available = len(buffer)
        max_size = self.max_frame_size
        while available - position >= 4:
            (size,) = _SIZE.unpack_from(buffer, position)
            if size < 0 or size > max_size:
                self._error = self._frame_error(size, bytes(buffer[position : position + 8]))
                raise self._error
            end = position + 4 + size
            if end > available:  # the frame goes on in the next reads
                self._size = size
                self._have = available - position - 4
                self._chunks = [bytes(buffer[position + 4 :])] if self._have else []
                return frames
            frames.append(bytes(buffer[position + 4 : end]))
            position = end
        if position < available:
            self._head = bytes(buffer[position:])
        return frames

    def _frame_error(self, size: int, prefix: bytes) -> FrameError:
        return frame_error(size, prefix, self.max_frame_size)


def frame_error(size: int, prefix: bytes, max_frame_size: int) -> FrameError:
    """The error for a size prefix outside 0..``max_frame_size`` (``prefix``: the frame's
    first bytes, for the hint when the peer is clearly not a Kafka client)."""
    hint = peer_hint(prefix)
    if size < 0:
        return NegativeFrameSizeError(
            f"invalid request frame size {size}: the stream is corrupt{hint}; "
            "closing the connection",
            size=size,
        )
    return FrameTooLargeError(
        f"request frame of {size} bytes exceeds socket.request.max.bytes="
        f"{max_frame_size}{hint}; closing the connection "
        "(raise socket.request.max.bytes if the client is legitimate)",
        size=size,
        max_size=max_frame_size,
    )
