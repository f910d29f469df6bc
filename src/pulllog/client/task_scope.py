"""TaskScope: an asyncio.TaskGroup held open by one supervisor task.

A TaskGroup lives for one ``async with`` block, but a Producer, a Consumer, or a Cluster with
its connections, lives from ``start()`` (or its first connection) to ``close()``, across many
calls from the application's tasks; every client holds its tasks in one TaskScope. A TaskScope bridges the two: :meth:`TaskScope.open`
creates one supervisor task that enters a TaskGroup and keeps it open; :meth:`TaskScope.spawn`
adds children to it; :meth:`TaskScope.aclose` cancels the supervisor, which cancels every
child and waits for them all. Nothing it started outlives ``aclose()``.

Rules:

- A child must not raise. As in any TaskGroup, a child ending in an exception cancels its
  siblings: a fetcher bug would stop the heartbeats, a broken connection every other
  connection. Children catch their own errors and hand them on (a future, an error parked
  for the application); a child ending by cancellation is fine.
- ``spawn()`` after ``aclose()`` (or before ``open()``) raises RuntimeError and closes the
  coroutine, so no "never awaited" warning is left behind.
- A child that must run its own shutdown (the producer's sender fails what is pending and
  closes the connections) is told to stop and joined with :func:`join_despite_cancellation`
  before ``aclose()``: cancelling a task that has not started yet would skip its ``finally``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskScope", "cancel_and_join", "join_despite_cancellation"]

T = TypeVar("T")


class TaskScope:
    def __init__(self, name: str) -> None:
        self.name = name
        self._supervisor: asyncio.Task[None] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._closed = False

    @property
    def is_open(self) -> bool:
        return self._tg is not None and not self._closed

    async def open(self) -> None:
        """Start the supervisor and wait until its task group takes children. Idempotent."""
        if self._closed:
            raise RuntimeError(f"{self.name}: this task scope was closed")
        if self._supervisor is not None:
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise(ready), name=self.name)
        await asyncio.shield(ready)

    async def _supervise(self, ready: asyncio.Future[None]) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                ready.set_result(None)
                await asyncio.get_running_loop().create_future()  # until aclose() cancels it
        finally:
            self._tg = None
            if not ready.done():
                ready.cancel()

    def spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``work`` as a child of the supervisor (see the rules: it must not raise)."""
        if self._tg is None or self._closed:
            work.close()
            raise RuntimeError(f"{self.name}: the task scope is closed (or not open yet); nothing can start in it")
        return self._tg.create_task(work, name=name)

    async def aclose(self) -> None:
        """Cancel every child and wait for them all; re-raise only if the caller itself is
        being cancelled. Idempotent."""
        self._closed = True
        task, self._supervisor = self._supervisor, None
        await cancel_and_join(task)


async def cancel_and_join(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait for it to end; re-raise only if the caller itself is being
    cancelled (the task's own CancelledError is the expected end)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def join_despite_cancellation(task: asyncio.Task[Any]) -> bool:
    """Wait until ``task`` is done even if the caller is cancelled meanwhile; answer whether it
    was (the caller re-raises once its cleanup is over). For a child told to stop rather than
    cancelled, so that its own shutdown runs even if it has not started yet."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    return cancelled
