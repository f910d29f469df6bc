"""A broker's own requests to another broker: one request and its answer on asyncio streams.

The replica fetcher (Fetch, OffsetForLeaderEpoch) and the transaction marker sender
(WriteTxnMarkers) talk to other brokers with net/'s codec; the broker never imports the client
package. Each caller keeps its own connection policy (the fetcher one long-lived connection per
leader, the marker sender one per request); the exchange itself and the lookup of a broker's
address are the same for both, and live here.

The fetcher's connection is a :class:`BrokerConnection`: its answers are up to
``replica.fetch.max.bytes`` (1 MiB) a partition, and each one is read with ``recv_into``
straight into one buffer of the answer's size, the waiting request woken once, when the answer
is whole. An asyncio StreamReader (the marker sender's, whose answers are small) wakes its
reader for every chunk, pauses and resumes reading each time its buffer passes twice its
limit (64 KiB), and copies the frame out of that buffer: for a 1 MiB answer a dozen
event-loop turns, each a chance for the follower to lose the CPU on a busy machine, and the
acks=all Produce waiting on the leader pays for every one of them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from ..net.apis import ApiKey
from ..net.build import build, request_class, response_class
from ..net.errors import ProtocolError
from ..net.framing import DEFAULT_MAX_FRAME_SIZE
from ..net.protocol import decode_response, encode_request

__all__ = ["BrokerConnection", "exchange", "registered_address"]

_SIZE = struct.Struct(">i")

Decoder = Callable[[bytes | bytearray], tuple[int, Any]]
"""An answer frame (size prefix off) -> (correlation id, body)."""


def registered_address(cluster_view: Any, broker_id: int) -> tuple[str, int] | None:
    """The host and port ``broker_id`` registered in ZooKeeper, as this broker's view holds it."""
    for registration in getattr(cluster_view, "brokers", ()):
        if registration.broker_id == broker_id:
            return registration.host, registration.port
    return None


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: ApiKey, version: int,
                   data: dict[str, Any], *, correlation_id: int, client_id: str) -> Any:
    """Send one request and read its answer. An answer to another request (a correlation id
    that does not match) raises ValueError: the connection is out of step and must be closed."""
    writer.write(_request(api, version, data, correlation_id, client_id))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return _response(await reader.readexactly(size), api, version, correlation_id)


def _request(api: ApiKey, version: int, data: dict[str, Any], correlation_id: int, client_id: str) -> bytes:
    return encode_request(build(request_class(api, version), data), correlation_id=correlation_id,
                          client_id=client_id)


def _response(frame: bytes | bytearray, api: ApiKey, version: int, correlation_id: int,
              decode: Decoder | None = None) -> Any:
    response: Any
    answered, response = decode_response(frame, response_class(api, version)) if decode is None else decode(frame)
    if answered != correlation_id:
        raise ValueError(f"response {answered} to request {correlation_id}")
    return response


class BrokerConnection(asyncio.BufferedProtocol):
    """A long-lived connection to another broker, one request at a time (module docstring).

    ``await BrokerConnection.open(host, port)``, then ``exchange`` as often as needed and
    ``close()``. A closed or broken connection raises OSError (EOFError when the other broker
    closed it), and one out of step (an answer to another request, one that does not decode)
    ValueError or ProtocolError, from that and every later ``exchange``: the caller opens a
    new one."""

    def __init__(self, max_answer_bytes: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_answer_bytes = max_answer_bytes
        self._transport: asyncio.Transport | None = None
        self._prefix = bytearray(_SIZE.size)
        self._prefix_read = 0
        self._frame: bytearray | None = None  # the answer being read, allocated at its size
        self._frame_read = 0
        self._answer: asyncio.Future[bytearray] | None = None
        self._error: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> BrokerConnection:
        _transport, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    async def exchange(self, api: ApiKey, version: int, data: dict[str, Any], *, correlation_id: int,
                       client_id: str, decode: Decoder | None = None) -> Any:
        """Send one request and wait for its answer (ValueError: an answer to another request).
        ``decode`` (the answer frame -> correlation id, body) replaces kio's reader, e.g.
        net.fetch.decode_fetch_response, whose records are views of the answer's buffer."""
        if self._error is not None:
            raise self._error
        assert self._transport is not None and self._answer is None, "one request at a time"
        answer = self._answer = asyncio.get_running_loop().create_future()
        try:
            self._transport.write(_request(api, version, data, correlation_id, client_id))
            frame = await answer
        finally:
            self._answer = None
        try:
            return _response(frame, api, version, correlation_id, decode)
        except (ValueError, ProtocolError) as exc:  # out of step with the other broker: for good
            self._fail(exc)
            raise

    def close(self) -> None:
        self._fail(OSError("the connection was closed"))

    # ------------------------------------------------------------------ asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._prefix)[self._prefix_read:]
        return memoryview(self._frame)[self._frame_read:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is None:
            self._prefix_read += nbytes
            if self._prefix_read < _SIZE.size:
                return
            self._prefix_read = 0
            (size,) = _SIZE.unpack(self._prefix)
            if not 0 <= size <= self.max_answer_bytes:
                self._fail(ValueError(f"an answer of {size} bytes (at most {self.max_answer_bytes})"))
                return
            self._frame, self._frame_read = bytearray(size), 0
            if size:
                return
        else:
            self._frame_read += nbytes
            if self._frame_read < len(self._frame):
                return
        frame, self._frame = self._frame, None
        if self._answer is None or self._answer.done():
            self._fail(ValueError("an answer to no request"))
            return
        self._answer.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc if exc is not None else EOFError("the other broker closed the connection"))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(self._error)
        if self._transport is not None:
            self._transport.close()
