"""Hierarchical timing wheel: the clock behind the purgatory.

The broker keeps many timers and cancels most of them: a Fetch that waits up to
``max_wait_ms`` for data usually gets its data first, a Produce with ``acks=all``
usually gets its acknowledgements before ``timeout_ms``. A heap of timers (what
``asyncio``'s ``call_later`` uses) pays O(log n) per insert and keeps a cancelled
timer in memory until it reaches the top. A timing wheel inserts and cancels in
O(1) and forgets a cancelled timer at once. This module is Kafka's
``TimingWheel`` / ``SystemTimer`` design, written for one asyncio thread.

The wheel
---------
A timing wheel is a circular array of ``wheel_size`` buckets. Each bucket is a
doubly-linked list of timer entries and stands for one tick (``tick_ms``), so the
wheel spans ``interval_ms = tick_ms * wheel_size``. The wheel has a current time,
always a multiple of ``tick_ms``; the bucket for the current time is the one that
is due now, the others cover the ticks that follow.

A timer due at ``expiration`` has the *virtual id* ``expiration // tick_ms``. If
``current_time + tick_ms <= expiration < current_time + interval_ms`` it goes into
bucket ``virtual_id % wheel_size``, and that bucket's expiration becomes
``virtual_id * tick_ms``. If ``expiration < current_time + tick_ms`` the timer is
already due and is not added: its task runs now. If it is beyond the interval it
goes to the *overflow wheel*: a wheel whose tick is this wheel's whole interval,
created the first time a timer needs it. Overflow wheels stack as far as timers
need them, so the levels cost nothing until they are used.

Worked example: tick 1 ms, wheel size 20 (the purgatory's defaults), the clock at 0.

    level 0   tick   1 ms   interval    20 ms   created with the timer
    level 1   tick  20 ms   interval   400 ms   created for the first timer >= 20 ms away
    level 2   tick 400 ms   interval 8,000 ms   created for the first timer >= 400 ms away

* A timer due at 7 fits level 0: bucket 7 % 20 = 7, bucket expiration 7.
* A timer due at 450 fits neither level 0 (450 >= 0 + 20) nor level 1
  (450 >= 0 + 400). Level 2 is created; virtual id 450 // 400 = 1, so the timer
  goes to bucket 1, whose expiration is 400.
* At 7 level 0's bucket 7 is due; its timer runs.
* At 400 level 2's bucket 1 is due. The clock of every level advances to 400 and
  each entry of the bucket is added again, from level 0: 450 >= 400 + 20 does not
  fit level 0; 400 + 20 <= 450 < 400 + 400 fits level 1, virtual id 22, so bucket
  22 % 20 = 2 with expiration 440. The timer has cascaded down one level.
* At 440 that bucket is due; the timer cascades again, into level 0, bucket
  450 % 20 = 10 with expiration 450.
* At 450 bucket 10 is due; re-adding the entry finds it due (450 < 450 + 1): the
  task runs, at its tick and not before.

A timer is touched once per level it passes through (at most log_20 of its delay:
three times for 8 s), not once per tick.

Finding the next bucket due
---------------------------
Kafka puts buckets (not timers) into a ``DelayQueue``. Here a :class:`BucketQueue`
keeps a heap of ``(expiration, bucket)``. A bucket is pushed when its expiration is
set, so the heap holds at most one item per bucket (``wheel_size`` per level), not
one per timer, whatever the number of timers. Items are invalidated lazily: an item
whose bucket no longer has that expiration is stale and skipped, and an empty
bucket at the head (all its timers were cancelled) is dropped, so a driver never
wakes up for nothing. :class:`Timer` pops every bucket due, advances the wheel's
clock to the bucket's expiration and re-adds its entries: they either run or drop
to a lower level.

Rules this module keeps
-----------------------
* A wheel's current time is a multiple of its tick; level ``k + 1``'s current time
  is level ``k``'s rounded down to level ``k + 1``'s tick. The clock only moves
  forward, and only past a bucket once that bucket has been flushed. So the buckets
  in use in one wheel have distinct virtual ids within one interval, and one bucket
  never mixes two turns of the wheel.
* An entry is in at most one bucket. Cancelling a task unlinks its entry at once
  and the timer's size drops at once.
* With a tick above 1 ms a timer may run up to ``tick_ms - 1`` ms early, as in
  Kafka: a bucket is due at the start of its tick.
* Not thread-safe: a :class:`Timer` belongs to one thread (the broker's event loop).
  Task callbacks run synchronously inside :meth:`Timer.add` and :meth:`Timer.poll`;
  an exception from one is logged and does not stop the others.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable

__all__ = [
    "BucketQueue",
    "Clock",
    "Timer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]
"""Returns the current time in milliseconds; it must never go backwards."""

_NO_EXPIRATION = -1


def monotonic_ms() -> int:
    """The default clock: ``time.monotonic`` in whole milliseconds."""
    return time.monotonic_ns() // 1_000_000


class TimerTask:
    """Something to run ``delay_ms`` after it is added to a :class:`Timer`.

    Subclasses implement :meth:`run`. :meth:`cancel` takes the task out of its
    timer at once; a cancelled task never runs.
    """

    __slots__ = ("delay_ms", "_entry")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._entry: TimerTaskEntry | None = None

    def run(self) -> None:
        """Called once, when the task is due."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Unlink the task from its bucket (O(1)); no-op if it is not in a timer."""
        entry = self._entry
        if entry is not None:
            entry.remove()
            self._entry = None

    def _attach(self, entry: TimerTaskEntry) -> None:
        # A task is in a timer at most once: adding it again moves it.
        old = self._entry
        if old is not None and old is not entry:
            old.remove()
        self._entry = entry


class TimerTaskEntry:
    """A task's place in the wheel: a node of a bucket's doubly-linked list."""

    __slots__ = ("task", "expiration_ms", "bucket", "next", "prev")

    def __init__(self, task: TimerTask | None, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.bucket: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None
        if task is not None:
            task._attach(self)

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or moved to another entry."""
        return self.task is None or self.task._entry is not self

    def remove(self) -> None:
        bucket = self.bucket
        if bucket is not None:
            bucket.remove(self)


class _TaskCounter:
    """Entries in a timer, shared by all the levels of one wheel."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: a circular doubly-linked list of entries with one expiration.

    The list hangs off a sentinel ``root`` so add and remove never test for the
    ends. ``expiration_ms`` is -1 while the bucket is not in the bucket queue.
    """

    __slots__ = ("expiration_ms", "_root", "_counter")

    def __init__(self, counter: _TaskCounter) -> None:
        root = TimerTaskEntry(None, _NO_EXPIRATION)
        root.next = root
        root.prev = root
        self._root = root
        self._counter = counter
        self.expiration_ms = _NO_EXPIRATION

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()
        root = self._root
        tail = root.prev
        assert tail is not None
        entry.next = root
        entry.prev = tail
        entry.bucket = self
        tail.next = entry
        root.prev = entry
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is not self:
            return
        nxt, prev = entry.next, entry.prev
        assert nxt is not None and prev is not None
        nxt.prev = prev
        prev.next = nxt
        entry.next = entry.prev = entry.bucket = None
        self._counter.value -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True if it changed (the bucket must be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def is_empty(self) -> bool:
        return self._root.next is self._root

    def flush(self, reinsert: Callable[[TimerTaskEntry], None]) -> None:
        """Remove every entry, hand each to ``reinsert``, and leave the queue."""
        root = self._root
        head = root.next
        while head is not root:
            assert head is not None
            self.remove(head)
            reinsert(head)
            head = root.next
        self.expiration_ms = _NO_EXPIRATION

    def __len__(self) -> int:
        count, node = 0, self._root.next
        while node is not self._root:
            assert node is not None
            count, node = count + 1, node.next
        return count

    def __repr__(self) -> str:
        return f"TimerTaskList(expiration_ms={self.expiration_ms}, entries={len(self)})"


class BucketQueue:
    """Buckets ordered by expiration: a heap with lazy invalidation.

    Kafka's ``DelayQueue`` of buckets, without the blocking: the driver asks
    :meth:`next_expiration_ms` how long it may sleep.
    """

    __slots__ = ("_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._order = itertools.count()  # breaks ties, so buckets are never compared

    def offer(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._order), bucket))

    def next_expiration_ms(self) -> int | None:
        """Expiration of the first bucket that still holds entries, if any."""
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if bucket.expiration_ms == expiration and not bucket.is_empty():
                return expiration
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration:
                bucket.expiration_ms = _NO_EXPIRATION  # emptied by cancels: reusable
        return None

    def poll(self, now_ms: int) -> TimerTaskList | None:
        """Pop the first bucket due at ``now_ms``, or None."""
        expiration = self.next_expiration_ms()
        if expiration is None or expiration > now_ms:
            return None
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)


class TimingWheel:
    """One level of the hierarchical wheel (see the module docstring)."""

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "_buckets",
        "_counter",
        "_queue",
        "_overflow",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        *,
        counter: _TaskCounter | None = None,
        queue: BucketQueue | None = None,
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(
                f"a timing wheel needs tick_ms >= 1 and wheel_size >= 2, "
                f"got tick_ms={tick_ms} wheel_size={wheel_size}"
            )
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self._counter = counter if counter is not None else _TaskCounter()
        self._queue = queue if queue is not None else BucketQueue()
        self._buckets = [TimerTaskList(self._counter) for _ in range(wheel_size)]
        self._overflow: TimingWheel | None = None

    @property
    def bucket_queue(self) -> BucketQueue:
        """The queue shared by this wheel and its overflow wheels."""
        return self._queue

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        """The next level up, or None until a timer needed it."""
        return self._overflow

    @property
    def size(self) -> int:
        """Entries in this wheel and its overflow wheels."""
        return self._counter.value

    def add(self, entry: TimerTaskEntry) -> bool:
        """Put the entry in its bucket; False if it is cancelled or already due."""
        if entry.cancelled:
            return False
        expiration = entry.expiration_ms
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            self._put(entry, expiration // self.tick_ms)
            return True
        overflow = self._overflow
        if overflow is None:
            overflow = self._overflow = self._new_overflow_wheel()
        return overflow.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        """Move this level (and the levels above) forward to ``time_ms``."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self._overflow is not None:
                self._overflow.advance_clock(self.current_time_ms)

    def _put(self, entry: TimerTaskEntry, virtual_id: int) -> None:
        bucket = self._buckets[virtual_id % self.wheel_size]
        bucket.add(entry)
        if bucket.set_expiration(virtual_id * self.tick_ms):
            self._queue.offer(bucket)

    def _new_overflow_wheel(self) -> TimingWheel:
        return TimingWheel(
            self.interval_ms,
            self.wheel_size,
            self.current_time_ms,
            counter=self._counter,
            queue=self._queue,
        )

    def __repr__(self) -> str:
        return (
            f"TimingWheel(tick_ms={self.tick_ms}, wheel_size={self.wheel_size}, "
            f"current_time_ms={self.current_time_ms})"
        )


class Timer:
    """Kafka's ``SystemTimer``: a timing wheel driven by a clock.

    Sans-I/O: :meth:`add` and :meth:`poll` never sleep. A driver (the purgatory's
    ``run``) sleeps until :meth:`next_expiration_ms` and then calls :meth:`poll`.
    The clock is injectable so tests can step it by hand.
    """

    __slots__ = ("_clock", "_wheel", "_queue", "_expired")

    def __init__(
        self,
        *,
        clock: Clock = monotonic_ms,
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: int | None = None,
    ) -> None:
        self._clock = clock
        start = clock() if start_ms is None else start_ms
        self._wheel = TimingWheel(tick_ms, wheel_size, start)
        self._queue = self._wheel.bucket_queue
        self._expired = 0

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def wheel(self) -> TimingWheel:
        """Level 0 of the wheel (for tests and the curious)."""
        return self._wheel

    @property
    def size(self) -> int:
        """Tasks waiting in the timer; drops at once when a task is cancelled."""
        return self._wheel.size

    @property
    def expired(self) -> int:
        """Tasks run because their deadline came (not cancelled first), since the timer started."""
        return self._expired

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now.

        A task whose delay is not positive, or that falls within the current tick,
        runs now, before ``add`` returns.
        """
        now = self._clock()
        entry = TimerTaskEntry(task, now + task.delay_ms)
        if task.delay_ms <= 0 or not self._wheel.add(entry):
            self._run_unless_cancelled(entry)

    def poll(self, now_ms: int | None = None) -> int:
        """Run every task due at ``now_ms`` (default: the clock); return how many ran.

        Tasks in higher levels whose bucket is due drop to a lower level.
        """
        now = self._clock() if now_ms is None else now_ms
        before = self._expired
        while (bucket := self._queue.poll(now)) is not None:
            self._wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(self._reinsert)
        # Every bucket up to `now` is flushed, so the clock may catch up: later
        # timers then land directly in the right level.
        self._wheel.advance_clock(now)
        return self._expired - before

    def next_expiration_ms(self) -> int | None:
        """When the next non-empty bucket is due (clock time), or None."""
        return self._queue.next_expiration_ms()

    def _reinsert(self, entry: TimerTaskEntry) -> None:
        if not self._wheel.add(entry):
            self._run_unless_cancelled(entry)

    def _run_unless_cancelled(self, entry: TimerTaskEntry) -> None:
        if entry.cancelled:
            return
        task = entry.task
        assert task is not None
        self._expired += 1
        try:
            task.run()
        except Exception:
            logger.exception("timer task %r failed; the timer goes on", task)

    def __repr__(self) -> str:
        return f"Timer(size={self.size}, wheel={self._wheel!r})"
