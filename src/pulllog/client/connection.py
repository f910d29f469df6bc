"""An asyncio connection to one broker: the thin I/O shell a client needs.

Requests are pipelined: ``request()`` writes a frame and awaits the response with the same
correlation id, which one reader task per connection matches up. Kafka brokers answer a
connection's requests in order, so responses arrive in the order they were sent; we still
match by correlation id, which also catches a confused peer.

The read loop is a task of the caller's :class:`~pulllog.client.task_scope.TaskScope` (a
Cluster's, for all its connections), or of the connection's own when it is used alone; it
never raises (a TaskGroup child that raised would cancel its siblings): whatever ends it
fails the requests in flight with ConnectionClosedError instead.

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
from .task_scope import TaskScope

__all__ = ["BrokerUnreachableError", "ConnectionClosedError", "KafkaConnection", "UnsupportedByBrokerError"]

log = logging.getLogger("pulllog.client")

_API_KEYS = {
    "produce": 0, "fetch": 1, "list_offsets": 2, "metadata": 3, "offset_commit": 8, "offset_fetch": 9,
    "find_coordinator": 10, "join_group": 11, "heartbeat": 12, "leave_group": 13, "sync_group": 14,
    "describe_groups": 15, "list_groups": 16, "api_versions": 18, "create_topics": 19, "delete_topics": 20,
    "delete_records": 21, "init_producer_id": 22, "describe_configs": 32, "alter_configs": 33,
    "describe_log_dirs": 35, "create_partitions": 37, "delete_groups": 42, "incremental_alter_configs": 44, "offset_delete": 47,
}
_SIZE = struct.Struct(">i")
# asyncio's StreamReader pauses the socket once it buffers twice its limit (64 KiB by
# default): every Fetch response of a few hundred KB then paused and resumed reading (two
# epoll_ctl calls and their bookkeeping per response). The read loop takes frames off as they
# arrive, so the limit only bounds a burst, not what a connection holds.
_READ_LIMIT = 4 << 20


class BrokerUnreachableError(ConnectionError):
    """No TCP connection could be made; the message names the address."""


class ConnectionClosedError(ConnectionError):
    """The connection closed while a request was waiting for its response."""


class UnsupportedByBrokerError(Exception):
    """The broker does not serve an API (or no version both sides speak)."""


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str, *,
                 max_response_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        # A peer that is not a Kafka broker (an HTTP server, TLS) or a broken one sends a size
        # prefix of garbage: without a cap the client would try to allocate up to 2 GiB for it.
        self.max_response_size = max_response_size
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], type]] = {}
        self._ids = itertools.count(1)
        self._read_task: asyncio.Task[None] | None = None
        self._own_tasks: TaskScope | None = None  # the read loop's scope when no caller gives one
        self._closed = False
        self._error: BaseException | None = None
        self._outgoing: list[bytes] = []  # frames written in this turn of the event loop (_write)

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
                      tasks: TaskScope | None = None) -> "KafkaConnection":
        """Connect and negotiate versions; the read loop runs in ``tasks`` (else in a scope of
        the connection's own, closed with it)."""
        conn = cls(host, port, client_id)
        try:
            # asyncio.timeout, not wait_for, here and below: Python 3.11's wait_for swallows a
            # cancellation that arrives as the awaited call completes.
            async with asyncio.timeout(timeout):
                conn._reader, conn._writer = await asyncio.open_connection(host, port, limit=_READ_LIMIT)
        except (OSError, asyncio.TimeoutError) as exc:
            if isinstance(exc, asyncio.TimeoutError):
                reason = "timed out"
            else:
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise BrokerUnreachableError(
                f"cannot connect to a broker at {host}:{port} ({reason}); is one running? "
                "start one with `pulllog serve`"
            ) from None
        try:
            if tasks is None:
                tasks = conn._own_tasks = TaskScope(f"pulllog-client-{host}:{port}")
                await tasks.open()
            conn._read_task = tasks.spawn(conn._read_loop(), f"pulllog-client-{host}:{port}")
            await conn._negotiate(timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

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
        if self._closed or self._writer is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from self._error
        correlation_id = next(self._ids)
        body = build(request_class(api, version), data)
        frame = encode_request(body, correlation_id=correlation_id, client_id=self.client_id)
        return await self._send(api, version, correlation_id, frame, expect_response)

    async def request_encoded(self, api: str, version: int, encode: Callable[[int, str | None], bytes]) -> Any:
        """``request`` for a frame encoded by hand: ``encode(correlation_id, client_id)``
        returns the whole frame, size prefix included (e.g. net.fetch.encode_fetch_request)."""
        if self._closed or self._writer is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from self._error
        correlation_id = next(self._ids)
        return await self._send(api, version, correlation_id, encode(correlation_id, self.client_id), True)

    async def _send(self, api: str, version: int, correlation_id: int, frame: bytes, expect_response: bool) -> Any:
        assert self._writer is not None
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (future, response_class(api, version))
        self._write(frame)
        try:
            await self._writer.drain()
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
        if not frames or self._writer is None or self._writer.is_closing():
            return  # closed meanwhile: _fail has failed the requests waiting for an answer
        self._writer.write(frames[0] if len(frames) == 1 else b"".join(frames))

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                head = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > self.max_response_size:
                    raise self._bad_frame(size, head)
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    raise ConnectionClosedError(f"{self.address} answered unknown correlation id {correlation_id}")
                future, response_type = entry
                if future.done():
                    continue
                try:
                    _cid, body = decode_response(frame, response_type)
                except Exception as exc:
                    future.set_exception(exc)
                    continue
                future.set_result(body)
        except asyncio.CancelledError:
            self._fail(ConnectionClosedError(f"connection to {self.address} closed"))
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(exc)
        except Exception as exc:  # a bug: fail this connection's requests, not the task group's other children
            log.error("the read loop of the connection to %s failed", self.address, exc_info=exc)
            self._fail(exc)

    def _bad_frame(self, size: int, head: bytes) -> ConnectionClosedError:
        hint = peer_hint(head) or " (is this a Kafka broker's port?)"
        return ConnectionClosedError(
            f"{self.address} sent a response frame of {size} bytes, outside 4..{self.max_response_size}"
            f"{hint}; closing the connection")

    def _fail(self, exc: BaseException) -> None:
        self._closed = True
        self._error = exc
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(f"connection to {self.address} was lost ({exc})"))
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._flush()  # what was written before close() goes out (a Produce with acks=0 has no answer to wait for)
        self._closed = True
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._own_tasks is not None:
            await self._own_tasks.aclose()
        self._fail(ConnectionClosedError("closed"))
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    def __repr__(self) -> str:
        return f"KafkaConnection({self.address}, in_flight={self.in_flight}, closed={self._closed})"


def _discard(future: asyncio.Future[Any] | None) -> None:
    """Nobody will await ``future``: cancel it, or mark the error the read loop's end already
    set on it as seen (else asyncio reports "Future exception was never retrieved")."""
    if future is None:
        return
    if future.done():
        if not future.cancelled():
            future.exception()
    else:
        future.cancel()
