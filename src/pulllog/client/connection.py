"""An asyncio connection to one broker: the thin I/O shell a client needs.

Requests are pipelined: ``request()`` writes a frame and awaits the response with the same
correlation id, which one reader task per connection matches up. Kafka brokers answer a
connection's requests in order, so responses arrive in the order they were sent; we still
match by correlation id, which also catches a confused peer.

Frames written in one turn of the event loop leave in one write at the end of the turn (a
pipelining producer's requests); a Fetch with nothing else waiting goes out at once, as a
consumer's round trip would otherwise wait a turn.

Reading is a ``BufferedProtocol`` (``_ResponseReader``), so no task per connection: the event
loop ``recv_into``s one reused buffer, and each complete frame is copied out once and handed
to the request waiting for it. The buffer starts at 256 KiB, grows to hold a larger frame
(never beyond ``max_response_size``, 100 MiB by default: a size prefix outside 4..cap, from a
peer that is not a Kafka broker or a broken one, closes the connection instead of making the
client allocate it), and goes back to 256 KiB after a frame over 8 MiB. asyncio's
``StreamReader`` instead grew and shrank its own buffer per read (an mmap/munmap per large
read) and copied every frame twice. Whatever ends the connection fails the requests in
flight with ConnectionClosedError.

A request can also be sent without a coroutine: ``send()`` writes a frame encoded by the
caller (correlation id from ``next_correlation_id()``) and the reader calls its
``on_response`` with the response frame, or with the error that ended the connection first.
The producer's sender sends every Produce request so: no task, no future and no event-loop
hop per request between the socket and the batches' completion. ``after_frames``, if set, is
called once after each read's frames were handed on (even if one of them failed): the
sender then writes the requests for the slots those answers freed in the same turn, before
it completes the answered batches, so the broker has the next requests while the client
finishes the last ones.

On connect the connection asks ApiVersions (v3, falling back to v0 as KIP-511 says) and
``version(api, lo, hi)`` then picks the highest version both sides speak.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..net.build import build, request_class, response_class
from ..net.framing import DEFAULT_MAX_FRAME_SIZE, peer_hint
from ..net.protocol import decode_response, encode_request

__all__ = ["BrokerUnreachableError", "ConnectionClosedError", "KafkaConnection", "ResponseCallback",
           "UnsupportedByBrokerError"]

log = logging.getLogger("pulllog.client")

_API_KEYS = {
    "produce": 0, "fetch": 1, "list_offsets": 2, "metadata": 3, "offset_commit": 8, "offset_fetch": 9,
    "find_coordinator": 10, "join_group": 11, "heartbeat": 12, "leave_group": 13, "sync_group": 14,
    "describe_groups": 15, "list_groups": 16, "api_versions": 18, "create_topics": 19, "delete_topics": 20,
    "delete_records": 21, "init_producer_id": 22, "describe_configs": 32, "alter_configs": 33,
    "describe_log_dirs": 35, "create_partitions": 37, "delete_groups": 42, "elect_leaders": 43,
    "incremental_alter_configs": 44, "offset_delete": 47,
}
# a transactional producer's requests (pulllog.client.txn_coordinator)
_API_KEYS.update({"add_partitions_to_txn": 24, "add_offsets_to_txn": 25, "end_txn": 26, "txn_offset_commit": 28})
# partition reassignment (KIP-455; pulllog.client.admin)
_API_KEYS.update({"alter_partition_reassignments": 45, "list_partition_reassignments": 46})
_SIZE = struct.Struct(">i")
_INITIAL_BUFFER = 256 << 10  # the read buffer's size, and what a recv_into may fill at once
_MIN_READ = 64 << 10  # room to leave for the next recv_into, compacting the buffer if needed
_KEEP_BUFFER = 8 << 20  # a buffer grown past this goes back to _INITIAL_BUFFER once empty
# the admin client's transaction APIs (pulllog.client.admin)
_API_KEYS.update({"write_txn_markers": 27, "describe_producers": 61, "describe_transactions": 65,
                   "list_transactions": 66})


ResponseCallback = Callable[[bytes | None, BaseException | None], None]
"""``send()``'s ``on_response``: (the response frame, None), or (None, why the connection ended)."""


class BrokerUnreachableError(ConnectionError):
    """No TCP connection could be made; the message names the address."""


class ConnectionClosedError(ConnectionError):
    """The connection closed while a request was waiting for its response."""


class UnsupportedByBrokerError(Exception):
    """The broker does not serve an API (or no version both sides speak)."""


class _ResponseReader(asyncio.BufferedProtocol):
    """Frames off the socket into one reused buffer (module docstring); write flow control."""

    def __init__(self, conn: "KafkaConnection") -> None:
        self._conn = conn
        self._buf = bytearray(_INITIAL_BUFFER)
        self._start = 0  # the first byte not yet handed on
        self._end = 0  # the end of what was received
        self._need = 0  # the size (prefix included) of the frame being received, once known
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._conn._transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        buf, start, end = self._buf, self._start, self._end
        want = max(self._need, _MIN_READ)
        if len(buf) - start < want or len(buf) - end < _MIN_READ:
            pending = end - start
            if want > len(buf):  # a frame larger than the buffer: a new one (never resized in place)
                grown = bytearray(want)
                grown[:pending] = buf[start:end]
                self._buf = grown
            elif start:
                buf[:pending] = buf[start:end]  # move the partial frame to the front
            self._start, self._end = 0, pending
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        conn = self._conn
        after = conn.after_frames
        if after is None:
            self._frames(conn)
            return
        try:
            self._frames(conn)
        finally:  # whatever happened to the frames: their handlers may have work left for it
            after()

    def _frames(self, conn: "KafkaConnection") -> None:
        """Hand on every complete frame in the buffer."""
        buf, start, end = self._buf, self._start, self._end
        cap = conn.max_response_size
        # one view for the read's frames (released before get_buffer may move or replace the
        # buffer): one copy per frame, where buf[a:b] would copy once more into a bytearray
        view = memoryview(buf)
        try:
            while end - start >= 4:
                (size,) = _SIZE.unpack_from(buf, start)
                if size < 4 or size > cap:
                    conn._fail(conn._bad_frame(size, bytes(buf[start:start + 4])))
                    return
                if end - start - 4 < size:
                    self._need = 4 + size
                    break
                frame = bytes(view[start + 4:start + 4 + size])
                start += 4 + size
                self._need = 0
                conn._frame_received(frame)
                if conn._closed:
                    return
        finally:
            view.release()
        if start == end:
            start = end = 0
            if len(buf) > _KEEP_BUFFER:
                self._buf = bytearray(_INITIAL_BUFFER)
        self._start, self._end = start, end

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn._fail(exc if exc is not None else ConnectionClosedError(f"{self._conn.address} closed the connection"))
        self._wake_writers(exc)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(None)

    def _wake_writers(self, exc: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None and not self.lost.done() and not self._conn._closed:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(ConnectionResetError(f"connection to {self._conn.address} lost"))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if not self._paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str, *,
                 max_response_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        # A peer that is not a Kafka broker (an HTTP server, TLS) or a broken one sends a size
        # prefix of garbage: without a cap the client would try to allocate up to 2 GiB for it.
        self.max_response_size = max_response_size
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._transport: asyncio.Transport | None = None
        self._protocol: _ResponseReader | None = None
        # correlation id -> (its future, the response class) for request(), or
        # (on_response, None) for send()
        self._pending: dict[int, tuple[Any, type | None]] = {}
        self._ids = itertools.count(1)
        # the correlation ids, for a caller of send() that takes them without a method call
        # (``next(conn.correlation_ids)``: the producer's sender, once per request)
        self.correlation_ids = self._ids
        self._closed = False
        self._error: BaseException | None = None
        self._outgoing: list[bytes] = []  # frames written in this turn of the event loop (_write)
        # Called once after the frames of one read were handed on (module docstring): None, or
        # the producer's sender, which refills the in-flight slots its answers freed at once.
        self.after_frames: Callable[[], None] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @classmethod
    async def connect(cls, host: str, port: int, *, client_id: str = "pulllog", timeout: float = 10.0,
                      max_response_size: int = DEFAULT_MAX_FRAME_SIZE) -> "KafkaConnection":
        """Connect and negotiate versions."""
        conn = cls(host, port, client_id, max_response_size=max_response_size)
        await conn.open(timeout)
        try:
            await conn._negotiate(timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def open(self, timeout: float = 10.0) -> None:
        """The TCP connection alone (``connect`` also negotiates versions)."""
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for, here and below: Python 3.11's wait_for swallows a
            # cancellation that arrives as the awaited call completes.
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    lambda: _ResponseReader(self), self.host, self.port)
        except (OSError, asyncio.TimeoutError) as exc:
            if isinstance(exc, asyncio.TimeoutError):
                reason = "timed out"
            else:
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise BrokerUnreachableError(
                f"cannot connect to a broker at {self.host}:{self.port} ({reason}); is one running? "
                "start one with `pulllog serve`"
            ) from None
        self._transport, self._protocol = transport, protocol  # type: ignore[assignment]

    async def _negotiate(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                resp = await self.request("api_versions", 3, {
                    "client_software_name": "pulllog", "client_software_version": "0.1.0"})
        except asyncio.TimeoutError:
            raise BrokerUnreachableError(f"{self.address} accepted the connection but did not answer ApiVersions") from None
        if resp.error_code != ErrorCode.none:
            async with asyncio.timeout(timeout):
                resp = await self.request("api_versions", 0, {})
        self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    def version(self, api: str, lo: int, hi: int) -> int:
        """The highest version in [lo, hi] that the broker also serves."""
        key = _API_KEYS[api]
        broker = self.api_versions.get(key)
        if broker is None:
            raise UnsupportedByBrokerError(f"the broker at {self.address} does not serve {api} (api key {key})")
        best = min(hi, broker[1])
        if best < max(lo, broker[0]):
            raise UnsupportedByBrokerError(
                f"no {api} version in common: client v{lo}-v{hi}, broker {self.address} v{broker[0]}-v{broker[1]}")
        return best

    async def request(self, api: str, version: int, data: Any, *, expect_response: bool = True) -> Any:
        if self._closed or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from self._error
        correlation_id = next(self._ids)
        body = build(request_class(api, version), data)
        frame = encode_request(body, correlation_id=correlation_id, client_id=self.client_id)
        return await self._send(api, version, correlation_id, frame, expect_response)

    async def request_encoded(self, api: str, version: int, encode: Callable[[int, str | None], bytes]) -> Any:
        """``request`` for a frame encoded by hand: ``encode(correlation_id, client_id)``
        returns the whole frame, size prefix included (e.g. net.fetch.encode_fetch_request)."""
        if self._closed or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from self._error
        correlation_id = next(self._ids)
        return await self._send(api, version, correlation_id, encode(correlation_id, self.client_id), True,
                                at_once=api == "fetch")

    def next_correlation_id(self) -> int:
        """The correlation id for the next frame given to ``send()``."""
        return next(self._ids)

    def send(self, correlation_id: int, frame: bytes, on_response: ResponseCallback | None, *,
             hold: bool = False) -> None:
        """Write ``frame`` (size prefix included, ``correlation_id`` in its header) without
        waiting. ``on_response`` (None: the request has no response, a Produce with acks=0)
        is called once from the event loop's read callback: with the response frame (size
        prefix off, correlation id first), or with the error that ended the connection
        before it came. Raises ConnectionClosedError if the connection is closed already.

        ``hold``: the caller calls ``flush()`` before it gives the event loop back (the
        producer's sender, once per turn), which saves the loop turn of a deferred write."""
        if self._closed or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from self._error
        if on_response is not None:
            self._pending[correlation_id] = (on_response, None)
        if hold:
            self._outgoing.append(frame)
        else:
            self._write(frame)

    def flush(self) -> None:
        """Write what ``send(hold=True)`` (or this turn's requests) left in the buffer, in one write."""
        if self._outgoing:
            self._flush()

    def abort(self, error: BaseException) -> None:
        """Close now: every request waiting for an answer fails with ``error``'s reason
        (``close()`` is the same and waits for the socket to be closed)."""
        self._fail(error)

    async def _send(self, api: str, version: int, correlation_id: int, frame: bytes, expect_response: bool,
                    *, at_once: bool = False) -> Any:
        assert self._transport is not None and self._protocol is not None
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (future, response_class(api, version))
        if at_once and not self._outgoing:
            # A consumer's Fetch is alone on its connection: deferring it to the end of the
            # turn would only add a loop turn to every round trip.
            self._transport.write(frame)
        else:
            self._write(frame)
        try:
            await self._protocol.drain()
        except ConnectionError as exc:
            self._pending.pop(correlation_id, None)  # we raise instead: nobody would read its future
            _discard(future)
            self._fail(exc)
            raise ConnectionClosedError(f"connection to {self.address} was lost: {exc}") from None
        except BaseException:
            _discard(future)  # cancelled while writing: its answer (or the connection's end) is ignored
            raise
        if future is None:
            return None
        return await future

    def _write(self, frame: bytes) -> None:
        """Send ``frame`` with every other frame written in this turn of the event loop, in
        one write: a pipelining producer fills several in-flight slots at once (one read
        brings several answers), and one send() for them, which the broker reads with one
        recv(), costs both sides a fraction of a system call and a wake-up per request."""
        if self._outgoing:
            self._outgoing.append(frame)
            return
        self._outgoing = [frame]
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        frames, self._outgoing = self._outgoing, []
        if not frames or self._transport is None or self._transport.is_closing():
            return  # closed meanwhile: _fail has failed the requests waiting for an answer
        self._transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _frame_received(self, frame: bytes) -> None:
        """A whole response frame (size prefix off): resolve the request it answers."""
        (correlation_id,) = _SIZE.unpack_from(frame)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            self._fail(ConnectionClosedError(f"{self.address} answered unknown correlation id {correlation_id}"))
            return
        future, response_type = entry
        if response_type is None:  # send()'s on_response
            future(frame, None)
            return
        if future.done():
            return
        try:
            _cid, body = decode_response(frame, response_type)
        except Exception as exc:  # a response we cannot read fails its request, not the connection
            future.set_exception(exc)
            return
        future.set_result(body)

    def _bad_frame(self, size: int, head: bytes) -> ConnectionClosedError:
        hint = peer_hint(head) or " (is this a Kafka broker's port?)"
        return ConnectionClosedError(
            f"{self.address} sent a response frame of {size} bytes, outside 4..{self.max_response_size}"
            f"{hint}; closing the connection")

    def _fail(self, exc: BaseException) -> None:
        self._closed = True
        if self._error is None:
            self._error = exc
        pending, self._pending = self._pending, {}
        for future, response_type in pending.values():
            if response_type is None:
                future(None, ConnectionClosedError(f"connection to {self.address} was lost ({exc})"))
            elif not future.done():
                future.set_exception(ConnectionClosedError(f"connection to {self.address} was lost ({exc})"))
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._flush()  # what was written before close() goes out (a Produce with acks=0 has no answer to wait for)
        self._fail(ConnectionClosedError("closed"))
        if self._protocol is not None:
            await asyncio.shield(self._protocol.lost)

    def __repr__(self) -> str:
        return f"KafkaConnection({self.address}, in_flight={self.in_flight}, closed={self._closed})"


def _discard(future: asyncio.Future[Any] | None) -> None:
    """Nobody will await ``future``: cancel it, or mark the error the connection's end already
    set on it as seen (else asyncio reports "Future exception was never retrieved")."""
    if future is None:
        return
    if future.done():
        if not future.cancelled():
            future.exception()
    else:
        future.cancel()
