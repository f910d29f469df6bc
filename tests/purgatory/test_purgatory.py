"""The purgatory: watch keys, completion by a watcher, expiration by the timer, async waiting."""

from __future__ import annotations

import asyncio

import pytest
from waits import wait_until

from pulllog.purgatory import monotonic_ms
from pulllog.purgatory.delayed import (
    DelayedOperation,
    DelayedOperationPurgatory,
    OperationCancelled,
    PurgatoryShutDown,
)


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Partitions:
    """Bytes available per partition: what a long-poll Fetch waits on."""

    def __init__(self) -> None:
        self.available: dict[str, int] = {}

    def append(self, partition: str, nbytes: int) -> None:
        self.available[partition] = self.available.get(partition, 0) + nbytes


class DelayedFetch(DelayedOperation):
    """Completes once min_bytes are available across its partitions, or at max_wait_ms."""

    def __init__(self, max_wait_ms: int, min_bytes: int, partitions: list[str], log: Partitions):
        super().__init__(max_wait_ms)
        self.min_bytes = min_bytes
        self.partitions = partitions
        self.log = log
        self.completions = 0
        self.expirations = 0
        self.response: int | None = None

    def try_complete(self) -> bool:
        if sum(self.log.available.get(p, 0) for p in self.partitions) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        self.response = sum(self.log.available.get(p, 0) for p in self.partitions)

    def on_expiration(self) -> None:
        assert self.completions == 1, "on_expiration must follow on_complete"
        self.expirations += 1


Purgatory = DelayedOperationPurgatory[str, DelayedFetch]


def make_purgatory() -> tuple[Purgatory, FakeClock, Partitions]:
    clock = FakeClock(0)
    return DelayedOperationPurgatory("Fetch", clock=clock), clock, Partitions()


def test_operation_that_can_complete_now_is_neither_watched_nor_timed() -> None:
    purgatory, _, log = make_purgatory()
    log.append("t-0", 100)
    op = DelayedFetch(500, 1, ["t-0"], log)

    assert purgatory.try_complete_else_watch(op, ["t-0"]) is True
    assert op.is_completed and op.completions == 1
    assert purgatory.watched("t-0") == 0
    assert purgatory.num_delayed == 0


def test_operation_that_cannot_complete_is_watched_under_every_key_and_timed() -> None:
    purgatory, _, log = make_purgatory()
    op = DelayedFetch(500, 1, ["t-0", "t-1"], log)

    assert purgatory.try_complete_else_watch(op, ["t-0", "t-1"]) is False
    assert purgatory.watched("t-0") == 1
    assert purgatory.watched("t-1") == 1
    assert purgatory.num_delayed == 1


def test_check_and_complete_completes_watchers_and_removes_them_from_the_timer() -> None:
    purgatory, _, log = make_purgatory()
    op = DelayedFetch(500, 10, ["t-0", "t-1"], log)
    purgatory.try_complete_else_watch(op, ["t-0", "t-1"])

    log.append("t-1", 5)
    assert purgatory.check_and_complete("t-1") == 0
    assert purgatory.num_delayed == 1

    log.append("t-1", 5)
    assert purgatory.check_and_complete("t-1") == 1
    assert op.is_completed and op.response == 10
    assert purgatory.num_delayed == 0  # unlinked from the wheel at once, not at its deadline
    assert purgatory.watched("t-0") == 0  # and forgotten by the other key too
    assert purgatory.watched("t-1") == 0


def test_check_and_complete_on_a_key_nobody_watches_is_zero() -> None:
    purgatory, _, _ = make_purgatory()
    assert purgatory.check_and_complete("nobody") == 0


def test_check_and_complete_completes_only_the_operations_whose_condition_holds() -> None:
    purgatory, _, log = make_purgatory()
    small = DelayedFetch(500, 1, ["t-0"], log)
    large = DelayedFetch(500, 1_000, ["t-0"], log)
    purgatory.try_complete_else_watch(small, ["t-0"])
    purgatory.try_complete_else_watch(large, ["t-0"])

    log.append("t-0", 10)
    assert purgatory.check_and_complete("t-0") == 1
    assert small.is_completed and large.is_waiting
    assert purgatory.watched("t-0") == 1
    assert purgatory.num_delayed == 1


def test_expiration_completes_once_and_calls_on_expiration_once() -> None:
    purgatory, clock, log = make_purgatory()
    op = DelayedFetch(500, 1, ["t-0"], log)
    purgatory.try_complete_else_watch(op, ["t-0"])

    clock.now_ms = 499
    assert purgatory.poll() == 0
    assert op.is_waiting

    clock.now_ms = 500
    assert purgatory.poll() == 1
    assert (op.completions, op.expirations) == (1, 1)
    assert op.response == 0
    assert purgatory.watched("t-0") == 0
    assert purgatory.num_delayed == 0

    clock.now_ms = 10_000
    log.append("t-0", 1)
    assert purgatory.poll() == 0
    assert purgatory.check_and_complete("t-0") == 0
    assert (op.completions, op.expirations) == (1, 1)


def test_watcher_and_timer_racing_complete_the_operation_once() -> None:
    purgatory, clock, log = make_purgatory()
    op = DelayedFetch(500, 1, ["t-0"], log)
    purgatory.try_complete_else_watch(op, ["t-0"])

    log.append("t-0", 1)
    assert op.force_complete() is True  # the watcher gets there first ...
    op.run()  # ... and the timer fires in the same tick
    assert op.force_complete() is False
    assert (op.completions, op.expirations) == (1, 0)


def test_on_complete_that_checks_its_own_key_does_not_complete_twice() -> None:
    purgatory, _, log = make_purgatory()

    class Reentrant(DelayedFetch):
        def on_complete(self) -> None:
            super().on_complete()
            assert purgatory.check_and_complete("t-0") == 0

    op = Reentrant(500, 1, ["t-0"], log)
    purgatory.try_complete_else_watch(op, ["t-0"])
    log.append("t-0", 1)

    assert purgatory.check_and_complete("t-0") == 1
    assert op.completions == 1


def test_operation_with_no_time_left_expires_at_once() -> None:
    purgatory, _, log = make_purgatory()
    op = DelayedFetch(0, 1, ["t-0"], log)

    assert purgatory.try_complete_else_watch(op, ["t-0"]) is False
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.watched("t-0") == 0
    assert purgatory.num_delayed == 0


def test_completed_operations_do_not_fill_the_wheel() -> None:
    purgatory, clock, log = make_purgatory()
    ops = [DelayedFetch(30_000, 1, [f"t-{i % 10}"], log) for i in range(1_000)]
    for op in ops:
        purgatory.try_complete_else_watch(op, op.partitions)
    assert purgatory.num_delayed == 1_000

    for i in range(10):
        log.append(f"t-{i}", 1)
        assert purgatory.check_and_complete(f"t-{i}") == 100

    assert purgatory.num_delayed == 0
    assert purgatory._timer.next_expiration_ms() is None  # no bucket left to wake up for
    clock.now_ms = 60_000
    assert purgatory.poll() == 0
    assert all(op.expirations == 0 for op in ops)


def test_cancel_removes_the_operation_without_completing_it() -> None:
    purgatory, clock, log = make_purgatory()
    op = DelayedFetch(500, 1, ["t-0"], log)
    purgatory.try_complete_else_watch(op, ["t-0"])

    op.cancel()
    assert op.is_cancelled
    assert purgatory.watched("t-0") == 0
    assert purgatory.num_delayed == 0
    clock.now_ms = 1_000
    purgatory.poll()
    assert op.force_complete() is False
    assert (op.completions, op.expirations) == (0, 0)


def test_cancel_for_key_cancels_the_operations_watching_it() -> None:
    purgatory, _, log = make_purgatory()
    a = DelayedFetch(500, 1, ["t-0"], log)
    b = DelayedFetch(500, 1, ["t-0", "t-1"], log)
    c = DelayedFetch(500, 1, ["t-1"], log)
    for op in (a, b, c):
        purgatory.try_complete_else_watch(op, op.partitions)

    assert set(purgatory.cancel_for_key("t-0")) == {a, b}
    assert a.is_cancelled and b.is_cancelled and c.is_waiting
    assert purgatory.watched("t-1") == 1
    assert purgatory.num_delayed == 1


def test_shutdown_cancels_everything_and_refuses_new_operations() -> None:
    purgatory, _, log = make_purgatory()
    ops = [DelayedFetch(500, 1, ["t-0"], log) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["t-0"])

    purgatory.shutdown()
    assert all(op.is_cancelled for op in ops)
    assert purgatory.num_delayed == 0
    with pytest.raises(PurgatoryShutDown, match="shut down"):
        purgatory.try_complete_else_watch(DelayedFetch(500, 1, ["t-0"], log), ["t-0"])


def test_an_operation_is_given_to_a_purgatory_once() -> None:
    purgatory, _, log = make_purgatory()
    op = DelayedFetch(500, 1, ["t-0"], log)
    purgatory.try_complete_else_watch(op, ["t-0"])
    with pytest.raises(ValueError, match="already"):
        purgatory.try_complete_else_watch(op, ["t-0"])


def test_try_complete_must_complete_when_it_says_so() -> None:
    class Liar(DelayedFetch):
        def try_complete(self) -> bool:
            return True

    purgatory, _, log = make_purgatory()
    with pytest.raises(TypeError, match="force_complete"):
        purgatory.try_complete_else_watch(Liar(500, 1, ["t-0"], log), ["t-0"])


# -- with a real event loop: generous bounds only, these must never be flaky --------


async def watched_by(purgatory: Purgatory, key: str, count: int) -> None:
    """Return once ``count`` operations watch ``key`` (a task's first step runs a pass later)."""
    async with asyncio.timeout(5):
        while purgatory.watched(key) != count:
            await asyncio.sleep(0)


async def test_operation_expires_at_its_deadline_not_before_with_the_driver_running() -> None:
    purgatory: Purgatory = DelayedOperationPurgatory("Fetch")
    log = Partitions()
    expired_at: list[int] = []

    class Timed(DelayedFetch):
        def on_expiration(self) -> None:
            super().on_expiration()
            expired_at.append(monotonic_ms())  # the purgatory's own clock

    async with asyncio.TaskGroup() as tg:
        tg.create_task(purgatory.run())
        op = Timed(50, 1, ["t-0"], log)
        due = monotonic_ms() + 50
        async with asyncio.timeout(5):
            await purgatory.wait(op, ["t-0"])
        purgatory.shutdown()

    assert op.expirations == 1 and purgatory.num_expired == 1
    assert expired_at[0] >= due  # the timer never fires before the deadline


async def test_check_and_complete_wakes_the_waiter_at_once() -> None:
    purgatory: Purgatory = DelayedOperationPurgatory("Fetch")
    log = Partitions()
    op = DelayedFetch(30_000, 1, ["t-0"], log)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(purgatory.run())
        tg.create_task(purgatory.wait(op, ["t-0"]))  # a Fetch handler's long poll
        await watched_by(purgatory, "t-0", 1)
        async with asyncio.timeout(5):
            log.append("t-0", 1)
            assert purgatory.check_and_complete("t-0") == 1
            await op.wait()
        purgatory.shutdown()

    # Completed by the append, not by its 30 s deadline.
    assert (op.completions, op.expirations) == (1, 0)
    assert purgatory.num_delayed == 0 and purgatory.num_expired == 0


async def test_earlier_deadline_wakes_a_sleeping_driver() -> None:
    purgatory: Purgatory = DelayedOperationPurgatory("Fetch")
    log = Partitions()
    late = DelayedFetch(60_000, 1, ["t-0"], log)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(purgatory.run())
        purgatory.try_complete_else_watch(late, ["t-0"])
        await wait_until(lambda: purgatory._sleeping_until is not None, "the driver sleeps until the 60 s bucket")
        early = DelayedFetch(20, 1, ["t-0"], log)
        async with asyncio.timeout(5):
            await purgatory.wait(early, ["t-0"])
        purgatory.shutdown()

    assert early.expirations == 1
    assert late.is_cancelled


async def test_cancelled_waiter_leaves_nothing_behind() -> None:
    purgatory: Purgatory = DelayedOperationPurgatory("Fetch")
    log = Partitions()
    op = DelayedFetch(30_000, 1, ["t-0"], log)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await purgatory.wait(op, ["t-0"])

    assert op.is_cancelled
    assert purgatory.watched("t-0") == 0
    assert purgatory.num_delayed == 0


async def test_shutdown_wakes_waiters_with_operation_cancelled_and_stops_the_driver() -> None:
    purgatory: Purgatory = DelayedOperationPurgatory("Fetch")
    log = Partitions()
    op = DelayedFetch(30_000, 1, ["t-0"], log)
    outcome: list[str] = []

    async def fetch_handler() -> None:
        try:
            await purgatory.wait(op, ["t-0"])
        except OperationCancelled:
            outcome.append("cancelled")

    async with asyncio.timeout(5):
        async with asyncio.TaskGroup() as tg:
            tg.create_task(purgatory.run())
            tg.create_task(fetch_handler())
            await watched_by(purgatory, "t-0", 1)
            purgatory.shutdown()  # the task group then exits: the driver returned

    assert outcome == ["cancelled"]
