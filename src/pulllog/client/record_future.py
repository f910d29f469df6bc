"""What ``Producer.send()`` returns: a record's future, backed by its batch's one outcome.

Kafka's Java client does not complete one future per record: a batch has one
``ProduceRequestResult``, and each record's ``FutureRecordMetadata`` only points at it with
the record's relative offset; the ``RecordMetadata`` is built when someone asks. We do the
same. A batch has one ``ProduceResult`` (its base offset, LogAppendTime or error, whether it
is done, and an asyncio future of that made only for whoever asks, such as ``flush()``), and ``send()`` returns a
``RecordFuture``: that result, the record's offset within the batch and its timestamp.
Completing a batch of 1,000 records is then one flag set, not 1,000 futures and
1,000 ``RecordMetadata`` objects, and a record whose future the caller drops costs the
garbage collector nothing. A batch split after MESSAGE_TOO_LARGE (``pulllog.client.
accumulator``) keeps its ``ProduceResult``, which then lists its pieces' results: a record
reads its own piece's base offset or error, and the batch's result is done once all are.

``RecordFuture`` is an asyncio future by duck typing (``asyncio.isfuture`` is true: it has
``_asyncio_future_blocking`` and the Future methods), so ``await``, ``asyncio.gather``,
``wait``, ``wait_for``, ``shield``, ``ensure_future`` and ``add_done_callback`` work as with
``asyncio.Future``. A task awaiting it waits on the record future itself, never on the
batch's, so cancelling that task cancels only this record's future.

Cancellation: ``cancel()`` detaches this one future (it reports cancelled, its callbacks
run) and nothing else. The record stays in its batch and is still sent, as with Kafka's
``Future.cancel``: the batch is already encoded and other records share it. Use
``Producer.close(timeout=0)`` to give up on unsent records.

A message set from ``send_batch()`` gets one plain asyncio future of its ``BatchMetadata``.
Besides a broker's ``KafkaError``, these futures fail with ``DeliveryTimeoutError`` or
``ProducerClosedError``, defined here with the values they stand in for.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
from collections.abc import Callable, Generator
from types import TracebackType
from dataclasses import dataclass
from typing import Any

from .types import RecordMetadata

__all__ = ["BatchMetadata", "DeliveryTimeoutError", "ProduceResult", "ProducerClosedError", "RecordFuture"]


class DeliveryTimeoutError(TimeoutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` of being created."""


class ProducerClosedError(RuntimeError):
    """The producer is closed (or closing), or closed before a record could be sent."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a message set from ``send_batch()`` landed: ``count`` records from ``base_offset``."""

    topic: str
    partition: int
    base_offset: int  # -1 with acks=0
    count: int
    timestamp: int  # ms; the broker's time for LogAppendTime topics, else the set's

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1 if self.base_offset >= 0 else -1

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.count) if self.base_offset >= 0 else range(0)


class ProduceResult:
    """One batch's outcome, shared by its records' futures (Kafka's ProduceRequestResult)."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time", "error", "error_tb", "loop", "finished",
                 "_done", "waiting", "pieces")

    def __init__(self, topic: str, partition: int, loop: asyncio.AbstractEventLoop) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1  # -1: acks=0, or not (yet) acknowledged
        self.log_append_time = -1  # ms, for LogAppendTime topics; else -1
        self.error: BaseException | None = None
        self.error_tb: TracebackType | None = None
        self.loop = loop
        self.finished = False  # acknowledged or failed (``done``'s state, without making it)
        # ``done``'s future, made when first asked for: flush() waits on a few batches, a
        # split batch on its pieces; records are told through ``waiting``. A batch-1 producer
        # would otherwise make and resolve an asyncio future per record, and every unsent
        # batch would hold one more object for the garbage collector to walk.
        self._done: asyncio.Future[None] | None = None
        # record futures with done-callbacks: told here, in one pass, when the batch is done
        self.waiting: list[RecordFuture] | None = None
        # After a split (MESSAGE_TOO_LARGE): (first relative offset, the piece's result) per
        # piece, in order; a record's outcome is then its piece's (see ``outcome``).
        self.pieces: list[tuple[int, ProduceResult]] | None = None

    @property
    def done(self) -> asyncio.Future[None]:
        """A future that resolves (to None) when the batch is done: acknowledged or failed."""
        done = self._done
        if done is None:
            done = self._done = self.loop.create_future()
            if self.finished:
                done.set_result(None)
        return done

    def split_into(self, pieces: list[tuple[int, ProduceResult]]) -> None:
        """The batch was split and its pieces re-sent: each record's outcome is its piece's,
        and this result is done once every piece is."""
        self.pieces = pieces
        left = [len(pieces)]

        def piece_done(_f: asyncio.Future[None]) -> None:
            left[0] -= 1
            if left[0] == 0 and not self.finished:
                self._set_done()

        for _first, piece in pieces:
            piece.done.add_done_callback(piece_done)

    def outcome(self, relative_offset: int) -> tuple[ProduceResult, int]:
        """The result that holds the record at ``relative_offset``, and its offset there."""
        r = self
        while r.pieces is not None:
            pieces = r.pieces
            i = bisect.bisect_right(pieces, relative_offset, key=lambda p: p[0]) - 1
            first, r = pieces[i]
            relative_offset -= first
        return r, relative_offset

    def set_acknowledged(self, base_offset: int, log_append_time: int) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        if self._done is None and self.waiting is None:  # nobody to tell (_set_done's common case)
            self.finished = True
        else:
            self._set_done()

    def set_failed(self, error: BaseException) -> None:
        self.error = error
        self.error_tb = error.__traceback__
        self._set_done()

    def _set_done(self) -> None:
        self.finished = True
        done = self._done
        if done is not None:
            done.set_result(None)
        waiting, self.waiting = self.waiting, None
        if waiting:
            self.loop.call_soon(_run_callbacks, waiting)


def _run_callbacks(waiting: list[RecordFuture]) -> None:
    """The done-callbacks of a batch's record futures, in the order they were added.

    One event-loop callback per batch instead of one per record, which would cost an
    asyncio Handle each. Each callback still runs from the event loop in its own context,
    and one that raises is reported as asyncio reports it, without stopping the others.
    """
    for future in waiting:
        fn, context, more = future._fn, future._context, future._more
        if fn is None and not more:
            continue  # cancelled (its callbacks were told then) or its callbacks removed
        future._fn = future._context = future._more = None
        if fn is not None:
            _run_callback(fn, context, future)  # type: ignore[arg-type]
        if more:
            for fn, context in more:
                _run_callback(fn, context, future)


def _run_callback(fn: _Callback, context: contextvars.Context, future: RecordFuture) -> None:
    try:
        context.run(fn, future)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        future.get_loop().call_exception_handler({
            "message": f"Exception in callback {fn!r}", "exception": exc, "future": future})


_Callback = Callable[["RecordFuture"], object]


class RecordFuture:
    """A future of one record's ``RecordMetadata``; see the module docstring."""

    __slots__ = ("_result", "relative_offset", "_timestamp", "_cancelled", "_fn", "_context", "_more",
                 "_asyncio_future_blocking")

    def __init__(self, result: ProduceResult, relative_offset: int, timestamp: int) -> None:
        self._result = result
        self.relative_offset = relative_offset  # the record's offset within its batch
        self._timestamp = timestamp
        self._cancelled: tuple[Any] | None = None  # (cancel message,) once cancelled
        # The done-callbacks: the first one in two slots (most futures have at most one,
        # and a pair would be one more object per record for the garbage collector), then
        # any others. Callbacks are told by the batch's ProduceResult, not by the loop.
        self._fn: _Callback | None = None
        self._context: contextvars.Context | None = None
        self._more: list[tuple[_Callback, contextvars.Context]] | None = None
        # asyncio.isfuture() wants it not None; a Task awaiting us sets it back to False
        self._asyncio_future_blocking = False

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._result.loop

    def done(self) -> bool:
        return self._cancelled is not None or self._result.finished

    def cancelled(self) -> bool:
        return self._cancelled is not None

    @property
    def _cancel_message(self) -> Any:  # read by asyncio.gather
        return self._cancelled[0] if self._cancelled is not None else None

    def cancel(self, msg: Any = None) -> bool:
        """Detach this future (the record is still sent); False if it is done already."""
        if self._cancelled is not None or self._result.finished:
            return False
        self._cancelled = (msg,)
        loop = self.get_loop()
        for fn, context in self._take_callbacks():
            loop.call_soon(fn, self, context=context)
        return True

    def add_done_callback(self, fn: _Callback, *, context: contextvars.Context | None = None) -> None:
        """Call ``fn(self)`` from the event loop once done (at once, soon, if done already).

        As with asyncio.Future, ``fn`` runs in ``context``, by default a copy of the caller's.
        """
        r = self._result
        if self._cancelled is not None or r.finished:
            r.loop.call_soon(fn, self, context=context)
            return
        if context is None:
            context = contextvars.copy_context()
        if self._fn is None and self._more is None:
            self._fn, self._context = fn, context
            if r.waiting is None:
                r.waiting = [self]
            else:
                r.waiting.append(self)
        elif self._more is None:
            self._more = [(fn, context)]
        else:
            self._more.append((fn, context))

    def remove_done_callback(self, fn: _Callback) -> int:
        listed = self._fn is not None or self._more is not None  # in the batch's waiting list
        callbacks = self._take_callbacks()
        kept = [(f, ctx) for f, ctx in callbacks if f != fn]
        if listed:
            self._more = kept  # a list, even empty: says we are listed, so never listed twice
        return len(callbacks) - len(kept)

    def _take_callbacks(self) -> list[tuple[_Callback, contextvars.Context]]:
        """Remove and return the callbacks, in the order they were added."""
        callbacks = [] if self._fn is None else [(self._fn, self._context)]
        if self._more:
            callbacks.extend(self._more)
        self._fn = self._context = self._more = None
        return callbacks  # type: ignore[return-value]

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        message = self._cancel_message
        return asyncio.CancelledError() if message is None else asyncio.CancelledError(message)

    def result(self) -> RecordMetadata:
        if self._cancelled is not None:
            raise self._make_cancelled_error()
        r = self._result
        if not r.finished:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        relative_offset = self.relative_offset
        if r.pieces is not None:
            r, relative_offset = r.outcome(relative_offset)
        if r.error is not None:
            raise r.error.with_traceback(r.error_tb)
        return RecordMetadata(r.topic, r.partition,
                              r.base_offset + relative_offset if r.base_offset >= 0 else -1,
                              r.log_append_time if r.log_append_time >= 0 else self._timestamp)

    def exception(self) -> BaseException | None:
        if self._cancelled is not None:
            raise self._make_cancelled_error()
        r = self._result
        if not r.finished:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if r.pieces is not None:
            return r.outcome(self.relative_offset)[0].error
        return r.error

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            self._asyncio_future_blocking = True
            yield self  # the Task adds its wake-up callback to us
            if not self.done():
                raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        r = self._result
        state = ("cancelled" if self._cancelled is not None else "pending" if not r.finished
                 else "failed" if r.error is not None else "acknowledged")
        return f"<RecordFuture {r.topic}-{r.partition} +{self.relative_offset} {state}>"
