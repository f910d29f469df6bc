"""Log flushes off the event loop, with group commit: ``flush.messages`` and ``flush.ms``.

A flush is an fsync of every segment file holding records past a log's recovery point
(``pulllog.log.log``). On a slow or failing disk it can take seconds, so it never runs on the
broker's event loop: :class:`LogFlusher` hands each one to a worker thread and tells the
waiters when it is done.

Rules kept here:

* At most one flush per log is under way. A flush asked for while one runs (more Produce
  requests whose appends made ``flush.messages`` due) waits for the *next* one, which
  starts as soon as the running one ends and covers every record appended meanwhile: one
  fsync for the lot (group commit), not one each. A flush that is started but has not yet
  taken its descriptors (its task has not run: the rest of the loop pass, e.g. the other
  pipelined requests of a read, comes first) still covers what is appended until then.
* A waiter's future resolves, on the event loop, only after the flush that covers its
  records has completed (``Log.complete_flush``: the recovery point has moved past them), to
  None, or to the OSError the fsync met (EIO, ENOSPC). After a failed fsync the log counts
  those records as unflushed again, so the next flush retries them; nothing is reported as
  on disk that is not.
* Each flush runs in a task of the broker's task group (``spawn``). When the broker stops
  gracefully, a flush under way finishes and answers its waiters; when the tasks are
  cancelled instead, the waiters' futures are cancelled (their requests go unanswered, as
  every request in hand then does) and closing the log waits for the fsync itself.
* Everything but ``PendingFlush.sync`` runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from ..log import Log
from ..log.log import PendingFlush

__all__ = ["FlushResult", "LogFlusher"]

log = logging.getLogger("pulllog.broker")

FlushResult = OSError | None
"""What a waiter learns: None once its records are on disk, or the OSError the fsync met."""

Spawn = Callable[[Coroutine[Any, Any, None]], Any]


class LogFlusher:
    def __init__(self, spawn: Spawn) -> None:
        self._spawn = spawn
        self._running: dict[Log, list[asyncio.Future[FlushResult]]] = {}
        """The waiters of the flush under way for a log."""
        self._next: dict[Log, list[asyncio.Future[FlushResult]]] = {}
        """The waiters of the flush that starts once the running one ends (asked for meanwhile)."""
        self._starting: set[Log] = set()
        """Logs whose flush is started but has not called ``begin_flush`` yet."""

    def flush(self, logs: Sequence[Log]) -> list[asyncio.Future[FlushResult]]:
        """Flush ``logs`` off the loop; one future per log, resolved once everything appended
        to it before this call is on disk (or with the fsync's OSError). Logs with no flush
        under way start one now, together (one worker-thread call).

        Each call gets futures of its own: a waiter that is cancelled (its connection closes)
        cancels nobody else's."""
        loop = asyncio.get_running_loop()
        start: list[Log] = []
        futures: list[asyncio.Future[FlushResult]] = []
        for partition_log in logs:
            future: asyncio.Future[FlushResult] = loop.create_future()
            futures.append(future)
            waiters = self._running.get(partition_log)
            if waiters is None:
                self._running[partition_log] = [future]
                start.append(partition_log)
            elif partition_log in self._starting:  # its descriptors are not taken yet: it covers this
                waiters.append(future)
            else:
                self._next.setdefault(partition_log, []).append(future)
        if start:
            self._start(start)
        return futures

    def busy(self, partition_log: Log) -> bool:
        """A flush of this log is under way."""
        return partition_log in self._running

    def _start(self, logs: list[Log]) -> None:
        run = self._run(logs)
        try:
            self._spawn(run)
        except RuntimeError:  # the task group is stopping: nothing new runs
            run.close()
            self._finish(logs, {}, cancelled=True)
            return
        self._starting.update(logs)

    async def _run(self, logs: list[Log]) -> None:
        self._starting.difference_update(logs)
        results: dict[Log, FlushResult] = {}
        handed: list[tuple[Log, PendingFlush]] = []
        for partition_log in logs:
            try:
                pending = partition_log.begin_flush()
            except OSError as exc:  # no descriptor left to hand over
                results[partition_log] = exc
                continue
            if pending is None:
                # Nothing unflushed: a synchronous flush (close) came first. (Every flush the
                # broker hands off goes through here, so no other one is under way.)
                results[partition_log] = None
            else:
                handed.append((partition_log, pending))
        cancelled = False
        try:
            if handed:
                await asyncio.to_thread(_sync_all, [pending for _, pending in handed])
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            for partition_log, pending in handed:
                # Cancelled (the broker stops): the thread still finishes each fsync, and
                # closing the log waits for it; what has finished is completed here already.
                if pending.done.is_set():
                    results[partition_log] = partition_log.complete_flush(pending)
            self._finish(logs, results, cancelled=cancelled)

    def _finish(self, logs: Iterable[Log], results: dict[Log, FlushResult], *, cancelled: bool) -> None:
        again: list[Log] = []
        for partition_log in logs:
            for future in self._running.pop(partition_log, ()):
                if future.done():  # its waiter was cancelled
                    continue
                if partition_log in results:
                    future.set_result(results[partition_log])
                else:
                    future.cancel()
            following = self._next.pop(partition_log, None)
            if following is None:
                continue
            if cancelled:
                for future in following:
                    future.cancel()
            else:
                self._running[partition_log] = following
                again.append(partition_log)
        if again:
            self._start(again)


def _sync_all(pending: list[PendingFlush]) -> None:
    """On a worker thread: every handed-off fsync (each one records its own error)."""
    for flush in pending:
        flush.sync()
