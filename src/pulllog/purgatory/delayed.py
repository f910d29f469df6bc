"""The purgatory: requests that wait for a condition or a deadline, whichever comes first.

A long-poll Fetch waits until ``min_bytes`` are available or ``max_wait_ms`` passes;
a Produce with ``acks=all`` waits until the followers caught up or ``timeout_ms``
passes. Each is a :class:`DelayedOperation`; the :class:`DelayedOperationPurgatory`
holds them until one of two things happens:

* **Its condition holds.** The operation is *watched* under keys, e.g. the
  topic-partitions a Fetch reads. When something changes for a key (data appended
  to a partition, the high watermark moved), the broker calls
  :meth:`~DelayedOperationPurgatory.check_and_complete` with that key; it calls
  :meth:`~DelayedOperation.try_complete` on the operations watching the key.
* **Its deadline passes.** Every operation also sits in a hierarchical timing
  wheel (tick 1 ms, wheel size 20, overflow wheels created on demand; see
  :mod:`pulllog.purgatory.timing_wheel` for how it works, with a worked example).
  When the deadline passes the timer forces the operation to complete, then calls
  :meth:`~DelayedOperation.on_expiration`.

Lifecycle of one operation::

    try_complete_else_watch(op, keys)
      |-- op.try_complete() is True ----------------------> completed, never watched
      '-- otherwise: watched under keys + added to timer
            |-- check_and_complete(key) -> try_complete() --> completed
            |-- deadline: timer -> force_complete() -------> completed + on_expiration()
            '-- op.cancel() / cancel_for_key() / shutdown() -> cancelled (no on_complete)

Rules this module keeps:

* **Exactly once.** :meth:`DelayedOperation.force_complete` wins for one caller
  only, whether the watcher, the timer or :meth:`~DelayedOperation.cancel` gets
  there first: the operation leaves the waiting state before ``on_complete`` runs,
  so even a re-entrant call (an ``on_complete`` that triggers ``check_and_complete``)
  loses. ``on_complete`` runs once, ``on_expiration`` at most once and only after
  ``on_complete``, and neither runs for a cancelled operation.
* **Nothing dead is kept.** On completion or cancellation an operation is unlinked
  from the timing wheel (O(1)) and removed from every watcher list (O(1) per key)
  at once. The timer's size is the number of operations still waiting, and a key
  nobody watches any more is forgotten. Kafka purges its watcher lists
  periodically; dict-backed watcher lists make that unnecessary here.
* **One owner.** A purgatory belongs to one event loop and is called from its
  thread only (from a worker thread, go through ``loop.call_soon_threadsafe``);
  nothing is locked, so the watcher and the timer never interleave. Its driver,
  :meth:`DelayedOperationPurgatory.run`, is a task in its owner's task group
  (``tg.create_task(purgatory.run())``); it sleeps until the next bucket of the wheel
  is due, or until an operation with an earlier deadline is added, and returns
  after :meth:`~DelayedOperationPurgatory.shutdown`. Operations added before the
  driver's first step are not missed: each pass reads the wheel's next deadline.

A request handler awaits its operation::

    class DelayedFetch(DelayedOperation):
        def try_complete(self) -> bool:
            if self.bytes_available() >= self.min_bytes:
                return self.force_complete()
            return False

        def on_complete(self) -> None:
            self.response = self.read_partitions()

    op = DelayedFetch(delay_ms=max_wait_ms, ...)
    await fetch_purgatory.wait(op, partitions)   # returns at min_bytes or max_wait_ms
    return op.response

and the log, after appending to a partition, calls
``fetch_purgatory.check_and_complete(partition)``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from pulllog.purgatory.timing_wheel import Clock, Timer, TimerTask, monotonic_ms

__all__ = [
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "OperationCancelled",
    "PurgatoryShutDown",
]

K = TypeVar("K", bound=Hashable)
Op = TypeVar("Op", bound="DelayedOperation")


class OperationCancelled(Exception):
    """The operation was cancelled (or its purgatory shut down) before it completed."""


class PurgatoryShutDown(OperationCancelled):
    """An operation was offered to a purgatory that has been shut down.

    A kind of :exc:`OperationCancelled`, so a handler catches both with one clause.
    """


class _State(enum.Enum):
    WAITING = "waiting"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class DelayedOperation(TimerTask):
    """An operation that completes when :meth:`try_complete` succeeds or ``delay_ms`` passes.

    Subclasses implement :meth:`try_complete` (check the condition; if it holds,
    ``return self.force_complete()``) and :meth:`on_complete` (the work to do on
    completion, e.g. build the response), and may override :meth:`on_expiration`.
    """

    __slots__ = ("_state", "_done", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._state = _State.WAITING
        self._done: asyncio.Event | None = None  # created by the first waiter
        self._purgatory: DelayedOperationPurgatory[Hashable, DelayedOperation] | None = None

    # -- to implement -------------------------------------------------------------

    def try_complete(self) -> bool:
        """If the condition holds, ``return self.force_complete()``; else return False."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Runs exactly once, when the operation completes (condition met or expired)."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Runs after :meth:`on_complete` when the deadline forced the completion."""

    # -- state --------------------------------------------------------------------

    @property
    def is_completed(self) -> bool:
        return self._state is _State.COMPLETED

    @property
    def is_cancelled(self) -> bool:
        return self._state is _State.CANCELLED

    @property
    def is_waiting(self) -> bool:
        """Neither completed nor cancelled yet."""
        return self._state is _State.WAITING

    def force_complete(self) -> bool:
        """Complete now; True for the one caller that did it, False for everyone else.

        Removes the operation from the timer and its watcher lists, then runs
        :meth:`on_complete` and wakes whoever awaits :meth:`wait`.
        """
        if not self._finish(_State.COMPLETED):
            return False
        try:
            self.on_complete()
        finally:
            self._wake_waiters()
        return True

    def cancel(self) -> None:
        """Give up on the operation: no :meth:`on_complete`; waiters get :exc:`OperationCancelled`.

        No-op if it already completed.
        """
        if self._finish(_State.CANCELLED):
            self._wake_waiters()

    async def wait(self) -> None:
        """Return once the operation completed; raise :exc:`OperationCancelled` if cancelled."""
        if self._state is _State.WAITING:
            if self._done is None:
                self._done = asyncio.Event()
            await self._done.wait()
        if self._state is _State.CANCELLED:
            raise OperationCancelled(f"{self!r} was cancelled before it completed")

    def run(self) -> None:
        # Called by the timer when the deadline passes.
        if self.force_complete():
            self.on_expiration()

    # -- internals ----------------------------------------------------------------

    def _finish(self, state: _State) -> bool:
        if self._state is not _State.WAITING:
            return False
        self._state = state  # before any callback: re-entrant calls see it finished
        super().cancel()  # unlink from the timing wheel at once
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._forget(self)
        return True

    def _wake_waiters(self) -> None:
        if self._done is not None:
            self._done.set()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(delay_ms={self.delay_ms}, {self._state.value})"


class DelayedOperationPurgatory(Generic[K, Op]):
    """Delayed operations of one kind (e.g. ``"Fetch"``), watched by key and timed by a wheel."""

    def __init__(
        self,
        name: str,
        *,
        clock: Clock = monotonic_ms,
        tick_ms: int = 1,
        wheel_size: int = 20,
    ) -> None:
        self.name = name
        self._clock = clock
        self._timer = Timer(clock=clock, tick_ms=tick_ms, wheel_size=wheel_size)
        self._watchers: dict[K, dict[Op, None]] = {}
        # Every operation not yet completed or cancelled, with the keys it is watched under.
        self._waiting: dict[Op, tuple[K, ...]] = {}
        self._shut_down = False
        self._running = False
        self._wakeup: asyncio.Event | None = None  # set to wake the driver early
        self._sleeping_until: int | None = None

    # -- what the broker calls ----------------------------------------------------

    def try_complete_else_watch(self, op: Op, watch_keys: Iterable[K]) -> bool:
        """Complete ``op`` now if it can; otherwise watch it under ``watch_keys`` until its deadline.

        Returns True if it completed now. An operation whose delay is not positive
        expires here and returns False.
        """
        if self._shut_down:
            raise PurgatoryShutDown(
                f"purgatory {self.name!r} is shut down; it takes no new operations"
            )
        if op._purgatory is not None or not op.is_waiting:
            raise ValueError(f"{op!r} was already given to a purgatory; create a new operation")
        if self._try_complete(op):
            return True
        self._watch(op, tuple(dict.fromkeys(watch_keys)))
        self._timer.add(op)
        self._wake_driver_if_earlier()
        return False

    def check_and_complete(self, key: K) -> int:
        """Try to complete the operations watching ``key``; return how many completed.

        ``try_complete`` and ``on_complete`` run here, in the caller (e.g. the code
        that appended to the partition): an exception from them propagates.
        """
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        for op in list(watching):  # completing an op removes it from `watching`
            if op.is_waiting and self._try_complete(op):
                completed += 1
        return completed

    async def wait(self, op: Op, watch_keys: Iterable[K]) -> None:
        """:meth:`try_complete_else_watch`, then wait until ``op`` completes or expires.

        If the waiting task is cancelled, so is ``op``: nothing is left behind.
        """
        if self.try_complete_else_watch(op, watch_keys):
            return
        try:
            await op.wait()
        except BaseException:
            op.cancel()
            raise

    def cancel_for_key(self, key: K) -> list[Op]:
        """Cancel every operation watching ``key``; return them."""
        ops = list(self._watchers.get(key, ()))
        for op in ops:
            op.cancel()
        return ops

    def shutdown(self) -> None:
        """Cancel every waiting operation, refuse new ones, and stop :meth:`run`."""
        self._shut_down = True
        for op in list(self._waiting):
            op.cancel()
        if self._wakeup is not None:
            self._wakeup.set()

    # -- driving the timer --------------------------------------------------------

    def poll(self, now_ms: int | None = None) -> int:
        """Expire the operations due at ``now_ms`` (default: the clock); return how many."""
        return self._timer.poll(now_ms)

    async def run(self) -> None:
        """Expire operations on time until :meth:`shutdown`: ``tg.create_task(purgatory.run())``."""
        if self._running:
            raise RuntimeError(f"purgatory {self.name!r} already has a driver running")
        self._running = True
        try:
            while not self._shut_down:
                self.poll()
                await self._sleep_until_next_expiration()
        finally:
            self._running = False
            self._wakeup = None
            self._sleeping_until = None

    # -- introspection ------------------------------------------------------------

    @property
    def num_delayed(self) -> int:
        """Operations in the timer, i.e. waiting for their deadline."""
        return self._timer.size

    @property
    def num_expired(self) -> int:
        """Operations completed by their deadline rather than their condition, ever."""
        return self._timer.expired

    def watched(self, key: K) -> int:
        """Operations watching ``key``."""
        return len(self._watchers.get(key, ()))

    def __repr__(self) -> str:
        return (
            f"DelayedOperationPurgatory({self.name!r}, waiting={len(self._waiting)}, "
            f"keys={len(self._watchers)})"
        )

    # -- internals ----------------------------------------------------------------

    def _try_complete(self, op: Op) -> bool:
        if not op.try_complete():
            return False
        if not op.is_completed:
            raise TypeError(
                f"{type(op).__name__}.try_complete() returned True without completing; "
                f"it must return self.force_complete()"
            )
        return True

    def _watch(self, op: Op, keys: tuple[K, ...]) -> None:
        op._purgatory = self  # type: ignore[assignment]
        self._waiting[op] = keys
        for key in keys:
            watching = self._watchers.get(key)
            if watching is None:
                watching = self._watchers[key] = {}
            watching[op] = None

    def _forget(self, op: Op) -> None:
        # Called once per operation, when it completes or is cancelled.
        for key in self._waiting.pop(op, ()):
            watching = self._watchers.get(key)
            if watching is None:
                continue
            watching.pop(op, None)
            if not watching:
                del self._watchers[key]

    def _wake_driver_if_earlier(self) -> None:
        wakeup = self._wakeup
        if wakeup is None or wakeup.is_set():
            return
        due = self._timer.next_expiration_ms()
        if due is not None and (self._sleeping_until is None or due < self._sleeping_until):
            wakeup.set()

    async def _sleep_until_next_expiration(self) -> None:
        self._wakeup = wakeup = asyncio.Event()
        due = self._sleeping_until = self._timer.next_expiration_ms()
        if due is None:
            await wakeup.wait()
            return
        delay_ms = due - self._clock()
        if delay_ms <= 0:
            await asyncio.sleep(0)  # let the loop run between passes over a backlog of due buckets
            return
        # The deadline sets the same event an earlier operation or shutdown() sets: one way
        # to wake up, and no cancellation (a timeout scope) on the driver's normal path.
        alarm = asyncio.get_running_loop().call_later(delay_ms / 1000, wakeup.set)
        try:
            await wakeup.wait()
        finally:
            alarm.cancel()
