"""The asyncio shell around the sans-I/O protocol: one task per connection.

Each connection's task belongs to the broker's task group (see :mod:`pulllog.broker.broker`):
it ends when the client goes, on an error of its own (which closes this connection only), or
at shutdown, after the request in hand (:meth:`Connection.begin_close`) or by cancellation.

Rules kept here:

* Requests on a connection are handled one at a time and answered in order, as Kafka does.
  Clients may pipeline: up to ``queued.max.requests`` frames are read ahead, then reading
  pauses until the queue drains (back-pressure, and bounded memory per connection).
* The server knows no API by name. It dispatches on the handler table
  (``pulllog.broker.handlers``) and applies each :class:`~pulllog.broker.handlers.Handler`'s
  declared rules: ``waits``, ``holds_answer``, ``unsupported_version``. It sees the broker
  through :class:`ConnectionHost` (the handlers' ``BrokerApi`` plus what connections need),
  never through the Broker class.
* A frame that cannot be a request (negative or oversized size, garbage) closes that
  connection with one log line; so does a request the broker cannot answer in its
  version (Kafka does the same), unless its handler declares an ``unsupported_version``
  answer (ApiVersions: the v0 answer with UNSUPPORTED_VERSION, so the client can pick a
  version).
* A handler that fails closes only its connection, with the traceback in the log. The
  broker keeps serving every other client.
* An OSError out of a handler is the OS refusing (a full disk, no descriptors left), not a
  bug: one log line, and the answer carries KAFKA_STORAGE_ERROR where the API has a
  top-level error code, and otherwise on every entry the request names (Produce, Fetch,
  ListOffsets: each partition; Metadata: each topic; DescribeGroups, OffsetFetch v8+: each
  group; DescribeConfigs: each resource; see ``faults.error_answer``). Handlers that change
  several things (CreateTopics, DeleteTopics, ...) answer their own per-topic codes.
* A handler returns a typed response; its record's ``encode`` makes the frame. Fetch's
  frames carry ``FileSlice`` chunks, sent with sendfile (zero copy) after the bytes before
  them have been flushed.
* Pipelined answers of a handler that ``holds_answer`` (Produce) go out in one write:
  while more requests are already queued, such an answer is held back (at most
  ``_HOLD_MAX``) and goes out with the next one. Any other request, and waiting for more
  bytes, sends what is held first, so an answer never waits behind a long poll. A write
  is a syscall, the largest single cost of a small request.
* Reading is a ``BufferedProtocol``: the event loop ``recv_into``s one reused buffer instead
  of receiving into a new 256 KiB bytes object per read. The buffer starts at 16 KiB (an
  idle connection holds no more), doubles up to 256 KiB while reads fill it (a pipelining
  producer), grows to hold a larger frame (up to ``socket.request.max.bytes``) and goes
  back to its size once empty after a frame over 8 MiB. A frame answered in the same read
  (below) is decoded where it lies, as a memoryview of the buffer: its records are copied
  once, out of the buffer, not first into a frame of their own. A frame that waits for the
  task (queued, or after one that needs it) is copied out as bytes before the next read can
  overwrite the buffer. A size prefix outside 0..``socket.request.max.bytes`` closes the
  connection as soon as it arrives.
* Requests whose handler never waits (a plain ``def``: Produce) are answered inside
  ``buffer_updated`` when the connection's task is idle (waiting for bytes, nothing queued
  or held, the transport writable), with one write for all the answers of that read. Order
  is kept: the first request that needs the task (another API, a request that does not
  decode, a full write buffer) goes to the task's queue with everything after it. This
  spares a batch-1 producer, which sends one request at a time, the task wake-up and the
  extra event-loop pass per request (an Event, a Future, a call_soon and a zero-timeout
  epoll_wait).
* A plain-``def`` handler that cannot answer yet returns a
  :class:`~pulllog.broker.handlers.Deferred` (Produce waiting for a ``flush.messages``
  fsync). It joins the connection's *outstanding* answers, in request order, and the task
  goes on with the requests whose handler ``holds_answer`` (more Produce requests, queued
  or arriving while the fsync runs: appended now, so one fsync covers them all); their
  answers queue behind it. The task sends the outstanding answers, oldest first, as they
  become ready, and all of them before any other request (whose answer must come after
  them). So answers keep their order, and only a request that meets a Deferred pays the
  task switch. An answer that is ready goes out before the task waits for a later one
  (acks=all: the next Produce's replication is a follower round trip away, and a pipelining
  producer would otherwise get every answer one round trip late).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from ..net.errors import RequestError, UnsupportedVersionError
from ..net.fetch import FileSlice
from ..net.framing import frame_error
from ..net.protocol import encode_response
from ..purgatory.delayed import OperationCancelled
from .api import BrokerApi
from .handlers import Deferred, Handler, RequestContext

if TYPE_CHECKING:
    from ..net.protocol import RequestDecoder

log = logging.getLogger("pulllog.broker")

_ids = itertools.count(1)
_new_tuple = tuple.__new__  # a named tuple (RequestContext) from its fields, without its Python __new__
_HOLD_MAX = 64
_CLOSE = object()  # Connection._storage_failed: no answer can carry the error; close the connection
_SIZE = struct.Struct(">i")
_FIRST_BUFFER = 16 << 10  # a connection's read buffer at first (an idle one keeps no more)
_READ_BUFFER = 256 << 10  # what the buffer doubles up to while reads fill it (asyncio's own max_size per read)
_KEEP_BUFFER = 8 << 20  # a buffer grown past this (a frame that large) goes back to its size once empty


class _Begun(NamedTuple):
    """A request whose handler answered with a Deferred: the task awaits it, in order."""

    handler: Handler
    request: Any
    deferred: Deferred


class ConnectionHost(BrokerApi, Protocol):
    """What a connection needs of the broker: the handlers' interface, the handler table and
    decoder, and the few settings and counters of the connection layer."""

    @property
    def handlers(self) -> Mapping[int, Handler]: ...

    @property
    def decoder(self) -> "RequestDecoder": ...

    connections: set["Connection"]
    accepting: bool
    zero_copy: bool
    internal_errors: int


class Connection(asyncio.BufferedProtocol):
    def __init__(self, broker: ConnectionHost) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.max_frame_size = broker.config.socket_request_max_bytes
        # The read buffer (module docstring): bytes [_start, _end) are received and not yet
        # handed on, a partial frame at most; _need is that frame's size with its prefix.
        self._size = _FIRST_BUFFER  # the buffer's size without a larger frame in it
        self._buf = bytearray(self._size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._need = 0
        self._offered = 0  # the room the last get_buffer gave: a read that fills it doubles _size
        self.frames: collections.deque[bytes | _Begun] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("?", 0)
        self._wakeup = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self._closing = False
        self._reading_paused = False
        self._held: list[bytes] = []  # answers waiting to go out with the next write
        # Answers not sent yet, in request order, from the oldest Deferred on: a _Begun to
        # await, or the encoded answer of a later request, ready but queued behind it.
        self._outstanding: collections.deque[_Begun | bytes] = collections.deque()
        self._idle = False  # the task waits for bytes with nothing queued or held
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are no asyncio.Transport subclass
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        if not self.broker.accepting or len(self.broker.connections) >= self.broker.config.max_connections:
            log.warning("refusing connection from %s:%d: max.connections=%d reached or shutting down",
                        *self.peer, self.broker.config.max_connections)
            transport.abort()
            self._closed = True
            return
        # The task belongs to the broker's task group, which joins it at shutdown.
        run = self._run()
        try:
            self.task = self.broker.task_group.create_task(run, name=f"pulllog-conn-{self.id}")
        except RuntimeError:  # the group is already stopping (a task of the broker's failed)
            run.close()
            transport.abort()
            self._closed = True
            return
        self.broker.connections.add(self)

    @property
    def buffered(self) -> int:
        """Bytes received that do not make a whole frame yet (the start of the next one)."""
        return self._end - self._start

    def get_buffer(self, sizehint: int) -> memoryview:
        buf, start, end = self._buf, self._start, self._end
        size = len(buf)
        want = self._need if self._need > self._size else self._size
        if size < want or size - end < size >> 2:
            pending = end - start
            if size < want:  # a larger frame, or a read filled the buffer: a new one
                grown = bytearray(want)
                grown[:pending] = self._view[start:end]
                self._buf, self._view = grown, memoryview(grown)
            elif start:  # move the partial frame to the front (no view of it is left: same length)
                buf[:pending] = self._view[start:end]
            self._start, self._end = 0, pending
        view = self._view[self._end:]
        self._offered = len(view)
        return view

    def buffer_updated(self, nbytes: int) -> None:
        end = self._end + nbytes
        if nbytes == self._offered and self._size < _READ_BUFFER:
            self._size <<= 1  # more was waiting: offer twice the room from the next read on
        if self._closing:
            self._start = self._end = 0
            return
        buf, view, start = self._buf, self._view, self._start
        frames: list[memoryview] = []
        need = 0
        max_size = self.max_frame_size
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0 or size > max_size:
                log.warning("closing connection from %s:%d: %s", *self.peer,
                            frame_error(size, bytes(view[start:start + 8]), max_size))
                self._abort()
                self._start = self._end = 0
                return
            stop = start + 4 + size
            if stop > end:  # the frame goes on in the next reads
                need = 4 + size
                break
            frames.append(view[start + 4:stop])  # valid until the next read: copied if kept
            start = stop
        self._need = need
        if start == end:
            start = end = 0
            if len(buf) > _KEEP_BUFFER:
                self._buf = bytearray(self._size)
                self._view = memoryview(self._buf)
        self._start, self._end = start, end
        if frames:
            left: list[memoryview] | list[memoryview | _Begun] = frames
            if self._idle and not self.frames and self._writable.is_set() and not self.broker.faults:
                left = self._answer_at_once(frames)
                if not left:
                    return
            # The task handles these after this read: out of the buffer the next read reuses.
            self.frames.extend([frame if type(frame) is _Begun else bytes(frame) for frame in left])  # type: ignore[arg-type]
            self._wakeup.set()
            if len(self.frames) >= self.broker.config.queued_max_requests and self.transport:
                self.transport.pause_reading()
                self._reading_paused = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._wakeup.set()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # ------------------------------------------------------------------ the connection task

    async def _next_frame(self) -> bytes | _Begun | None:
        while not self.frames:
            if self._outstanding:  # nothing else to do: finish the oldest answer, then look again
                if self._closed:
                    return None
                head = self._outstanding[0]
                if type(head) is bytes or head.deferred.ready():  # type: ignore[union-attr]
                    if not await self._send_outstanding():
                        return None
                else:  # its fsync runs: meanwhile handle what arrives (a Produce shares the next one)
                    if self._held:  # the answers before it are ready: they do not wait for it
                        await self._write(b"")
                    await self._wait_for(head.deferred)  # type: ignore[union-attr]
                continue
            if self._held:
                await self._write(b"")
            if self._closed or self._closing:
                return None
            self._wakeup.clear()
            self._idle = True
            try:
                await self._wakeup.wait()
            finally:
                self._idle = False
        frame = self.frames.popleft()
        if self._reading_paused and len(self.frames) < self.broker.config.queued_max_requests // 2 + 1:
            self._reading_paused = False
            if self.transport and not self._closed:
                self.transport.resume_reading()
        return frame

    async def _run(self) -> None:
        try:
            while True:
                frame = await self._next_frame()
                if frame is None or not await self._handle(frame):
                    break
        except (OperationCancelled, ConnectionError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection from %s:%d failed; closing it", *self.peer)
        finally:
            self.broker.connections.discard(self)
            self._close_transport()

    def _close_transport(self) -> None:
        # Never raises: an error escaping a connection's task would stop the whole broker's
        # task group, and one connection must only ever close itself.
        if self.transport is None or self._closed:
            return
        try:
            if self._held:
                self.transport.write(b"".join(self._held))
            self.transport.close()
        except Exception:
            log.exception("closing the connection from %s:%d failed", *self.peer)
            self.transport.abort()

    async def _handle(self, frame: bytes | _Begun) -> bool:
        if isinstance(frame, _Begun):  # handled in buffer_updated; its answer comes later
            self._outstanding.append(frame)
            return True
        broker = self.broker
        try:
            request = broker.decoder.decode(frame)
        except UnsupportedVersionError as exc:
            refused = broker.handlers[exc.api_key] if exc.api_key in broker.supported_apis else None
            if refused is not None and refused.unsupported_version is not None:
                body = refused.unsupported_version(broker, exc.api_version or 0)
                if not await self._send_all_outstanding():
                    return False
                await self._write(encode_response(exc.correlation_id, body))
                return True
            log.warning("closing connection from %s:%d: %s", *self.peer, exc)
            return False
        except RequestError as exc:
            log.warning("closing connection from %s:%d: %s", *self.peer, exc)
            return False
        handler = broker.handlers[request.api_key]
        if self._outstanding and (not handler.holds_answer or broker.faults):
            # Only a request whose answer may queue is handled before the outstanding answers are out.
            if not await self._send_all_outstanding():
                return False
        if self._held and not handler.holds_answer:
            await self._write(b"")
        if broker.faults:  # a test injected faults (broker/faults.py): one truth test when none is set
            handler = await broker.faults.intercept(handler, request)
        ctx = _new_tuple(RequestContext, (request, *self.peer, self.id))
        try:
            response: Any = handler.fn(broker, ctx)
            if handler.waits:
                response = await response
            elif type(response) is Deferred:  # its answer comes later (an fsync), in order
                self._outstanding.append(_Begun(handler, request, response))
                return True
            if response is None:  # no answer (Produce with acks=0)
                return True
            encoded = handler.encode(request.correlation_id, request.api_version, response)
        except (OperationCancelled, asyncio.CancelledError):
            raise
        except OSError as exc:
            encoded = self._storage_failed(handler.name, request, exc)
            if encoded is _CLOSE:
                return False
            if encoded is None:
                return True
        except Exception:
            self._handler_failed(handler.name, request)
            return False
        if self._outstanding:  # behind an answer not sent yet (only a Produce gets here: bytes)
            self._outstanding.append(encoded)  # type: ignore[arg-type]
            return True
        if type(encoded) is bytes:
            if handler.holds_answer and self.frames and len(self._held) < _HOLD_MAX:
                self._held.append(encoded)  # more requests are queued: answer them in one write
            else:
                await self._write(encoded)
        else:
            await self._write_chunks(encoded)  # type: ignore[arg-type]
        return True

    async def _wait_for(self, deferred: Deferred) -> None:
        """Until the deferred answer is ready or more bytes (or the close) arrive. The task is
        not idle meanwhile: buffer_updated queues frames instead of answering them itself."""
        self._wakeup.clear()
        wake = self._wakeup.set
        undo = deferred.on_ready(lambda _future: wake())
        try:
            await self._wakeup.wait()
        finally:
            undo()

    async def _send_all_outstanding(self) -> bool:
        while self._outstanding:
            if not await self._send_outstanding():
                return False
        return True

    async def _send_outstanding(self) -> bool:
        """Send the oldest outstanding answer, awaiting it if it is a Deferred; False when
        the connection must close."""
        item = self._outstanding.popleft()
        if type(item) is bytes:
            encoded: Any = item
        else:
            assert isinstance(item, _Begun)
            if self._held:  # the answers before it need not wait for its fsync
                await self._write(b"")
            request = item.request
            try:
                response = await item.deferred
                if response is None:
                    return True
                encoded = item.handler.encode(request.correlation_id, request.api_version, response)
            except (OperationCancelled, asyncio.CancelledError):
                raise
            except OSError as exc:
                encoded = self._storage_failed(item.handler.name, request, exc)
                if encoded is _CLOSE:
                    return False
                if encoded is None:
                    return True
            except Exception:
                self._handler_failed(item.handler.name, request)
                return False
        if (self._outstanding or self.frames) and len(self._held) < _HOLD_MAX:
            self._held.append(encoded)  # more answers follow: one write for them
        else:
            await self._write(encoded)
        return True

    def _answer_at_once(self, frames: list[memoryview]) -> list[memoryview] | list[memoryview | _Begun]:
        """Answer the leading requests whose handler never waits (the first answer at once, the
        others in one write); return the frames left for the task (from the first one that
        needs it on). The frames are views of the read buffer: nothing here keeps one."""
        broker = self.broker
        handlers = broker.handlers
        answers: list[bytes] = []
        done = 0
        for frame in frames:
            handler = handlers.get(frame[0] << 8 | frame[1]) if len(frame) >= 8 else None
            if handler is None or handler.waits:
                break
            try:
                request = broker.decoder.decode(frame)
            except RequestError:
                break  # the task refuses it, in order, as it refuses any other
            ctx = _new_tuple(RequestContext, (request, *self.peer, self.id))
            try:
                response: Any = handler.fn(broker, ctx)
                if type(response) is Deferred:
                    # Its answer comes later (an fsync): the task awaits it, and every frame
                    # after it waits behind it, so answers stay in order.
                    self._idle = False
                    done += 1
                    if answers and self.transport is not None:
                        self.transport.write(b"".join(answers))
                    left: list[memoryview | _Begun] = [_Begun(handler, request, response)]
                    left += frames[done:]
                    return left
                if response is not None:  # None: no answer (Produce with acks=0)
                    encoded = handler.encode(request.correlation_id, request.api_version, response)  # type: ignore[arg-type]
                    if done == 0 and self.transport is not None:
                        # The read's first answer goes at once, the rest in one write below: a
                        # client with a few requests in flight (Kafka's Java default is 5) then
                        # writes its next one while this broker handles the others of the read,
                        # instead of the two taking turns.
                        self.transport.write(encoded)
                    else:
                        answers.append(encoded)
            except OperationCancelled:
                self._closing = True
            except OSError as exc:
                encoded = self._storage_failed(handler.name, request, exc)
                if encoded is _CLOSE or (encoded is not None and type(encoded) is not bytes):
                    self._closing = True  # (chunks go out from the task only; Fetch always waits)
                elif encoded is not None:
                    answers.append(encoded)
            except Exception:
                self._handler_failed(handler.name, request)
                self._closing = True
            if self._closing:  # the task closes the connection once what is answered is out
                self._wakeup.set()
                done = len(frames)
                break
            done += 1
        if answers and self.transport is not None:
            self.transport.write(answers[0] if len(answers) == 1 else b"".join(answers))
        return frames[done:]

    def _storage_failed(self, name: str, request: Any, exc: OSError) -> Any:
        """The answer to a request whose handler met an OSError the handler did not answer
        itself (a full disk, no file descriptors left): KAFKA_STORAGE_ERROR, where the API's
        answer has a top-level error code or one per entry (module docstring); otherwise
        _CLOSE, the connection closes (the handlers that write answer per topic themselves). Either
        way one log line, no traceback: the OS refused, the broker did nothing wrong."""
        log.error("%s v%d from %s (%s:%d) failed on storage: %s", name, request.api_version, request.client_id,
                  *self.peer, exc)
        from .faults import encoded_error_answer  # imported on the first storage failure, not by every start

        try:
            return encoded_error_answer(request, ErrorCode.kafka_storage_error)
        except ValueError:
            return _CLOSE

    def _handler_failed(self, name: str, request: Any) -> None:
        self.broker.internal_errors += 1
        log.exception("%s v%d from %s (%s:%d) failed; closing the connection",
                      name, request.api_version, request.client_id, *self.peer)

    # ------------------------------------------------------------------ writing

    async def _write(self, data: bytes) -> None:
        if self._closed or self.transport is None:
            raise ConnectionError("connection closed")
        if self._held:
            self._held.append(data)
            data = b"".join(self._held)
            self._held.clear()
        self.transport.write(data)
        if not self._writable.is_set():
            await self._writable.wait()

    async def _write_chunks(self, chunks: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        for chunk in chunks:
            if isinstance(chunk, FileSlice):
                if self._closed or self.transport is None:
                    raise ConnectionError("connection closed")
                if not self.broker.zero_copy:
                    data = os.pread(chunk.file.fileno(), chunk.length, chunk.position)
                    if len(data) != chunk.length:
                        raise ConnectionError("segment shorter than promised")
                    await self._write(data)
                    continue
                try:
                    sent = await loop.sendfile(self.transport, chunk.file, chunk.position, chunk.length,
                                               fallback=False)
                except (asyncio.SendfileNotAvailableError, NotImplementedError) as exc:  # uvloop: no sendfile
                    # asyncio's own fallback reads from the file's current position when the
                    # offset is 0, which is wrong for a shared segment file: read it ourselves.
                    log.debug("sendfile unavailable (%s); copying %d bytes", exc, chunk.length)
                    data = os.pread(chunk.file.fileno(), chunk.length, chunk.position)
                    if len(data) != chunk.length:
                        raise ConnectionError("segment shorter than promised") from None
                    await self._write(data)
                    continue
                if sent != chunk.length:
                    # The size prefix promised more: the frame is broken, so the connection must go.
                    log.error("sendfile sent %d of %d bytes (%s at %d, file size %d) to %s:%d; closing the connection",
                              sent, chunk.length, getattr(chunk.file, "name", chunk.file), chunk.position,
                              os.fstat(chunk.file.fileno()).st_size, *self.peer)
                    raise ConnectionError("short sendfile")
            else:
                await self._write(chunk)

    # ------------------------------------------------------------------ shutdown

    def begin_close(self) -> None:
        """Finish the request in hand, read no more, then close."""
        self._closing = True
        self._wakeup.set()

    def _abort(self) -> None:
        self._closing = True
        self._closed = True
        self._wakeup.set()
        if self.transport is not None:
            self.transport.abort()
