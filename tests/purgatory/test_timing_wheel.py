"""The hierarchical timing wheel, driven by a clock the tests step by hand."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.purgatory.timing_wheel import Timer, TimerTask, TimerTaskEntry, TimingWheel


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Recorder(TimerTask):
    """Records (name, clock time) when it runs."""

    def __init__(self, name: object, delay_ms: int, clock: FakeClock, fired: list) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.clock = clock
        self.fired = fired

    def run(self) -> None:
        self.fired.append((self.name, self.clock()))


def make_timer(now_ms: int = 0) -> tuple[Timer, FakeClock, list]:
    clock = FakeClock(now_ms)
    return Timer(clock=clock, tick_ms=1, wheel_size=20), clock, []


def step_to(timer: Timer, clock: FakeClock, until_ms: int) -> None:
    """Poll at every millisecond up to and including until_ms, like a driver would."""
    while clock.now_ms < until_ms:
        clock.now_ms += 1
        timer.poll()


def test_task_fires_at_its_tick_not_before() -> None:
    timer, clock, fired = make_timer()
    timer.add(Recorder("a", 5, clock, fired))

    step_to(timer, clock, 4)
    assert fired == []
    step_to(timer, clock, 5)
    assert fired == [("a", 5)]
    assert timer.size == 0


def test_overflow_wheels_are_created_on_demand() -> None:
    timer, clock, fired = make_timer()
    level0 = timer.wheel
    assert level0.overflow_wheel is None

    timer.add(Recorder("near", 19, clock, fired))
    assert level0.overflow_wheel is None

    timer.add(Recorder("level1", 20, clock, fired))
    level1 = level0.overflow_wheel
    assert level1 is not None
    assert (level1.tick_ms, level1.interval_ms) == (20, 400)
    assert level1.overflow_wheel is None

    timer.add(Recorder("level2", 400, clock, fired))
    level2 = level1.overflow_wheel
    assert level2 is not None
    assert (level2.tick_ms, level2.interval_ms) == (400, 8000)


def test_task_cascades_down_the_levels_as_in_the_docstring_example() -> None:
    timer, clock, fired = make_timer()
    task = Recorder("450", 450, clock, fired)
    timer.add(task)

    def bucket_expiration() -> int:
        assert task._entry is not None and task._entry.bucket is not None
        return task._entry.bucket.expiration_ms

    assert bucket_expiration() == 400  # level 2, bucket [400, 800)
    assert timer.next_expiration_ms() == 400

    clock.now_ms = 400
    assert timer.poll() == 0
    assert bucket_expiration() == 440  # dropped to level 1, bucket [440, 460)

    clock.now_ms = 440
    assert timer.poll() == 0
    assert bucket_expiration() == 450  # dropped to level 0, bucket [450, 451)

    clock.now_ms = 449
    assert timer.poll() == 0
    clock.now_ms = 450
    assert timer.poll() == 1
    assert fired == [("450", 450)]


def test_one_poll_long_after_the_deadline_cascades_through_every_level() -> None:
    timer, clock, fired = make_timer()
    timer.add(Recorder("far", 123_456, clock, fired))

    clock.now_ms = 1_000_000
    assert timer.poll() == 1
    assert fired == [("far", 1_000_000)]


def test_cancelled_task_is_unlinked_at_once_and_never_runs() -> None:
    timer, clock, fired = make_timer()
    keep = Recorder("keep", 30, clock, fired)
    drop = Recorder("drop", 30, clock, fired)
    timer.add(keep)
    timer.add(drop)
    assert timer.size == 2

    drop.cancel()
    assert timer.size == 1
    assert drop._entry is None

    step_to(timer, clock, 100)
    assert fired == [("keep", 30)]


def test_bucket_emptied_by_cancels_is_not_reported_as_due() -> None:
    timer, clock, fired = make_timer()
    task = Recorder("x", 50, clock, fired)
    timer.add(task)
    assert timer.next_expiration_ms() == 40  # level 1 bucket [40, 60)

    task.cancel()
    assert timer.next_expiration_ms() is None
    assert timer.size == 0


def test_task_added_in_the_past_runs_immediately() -> None:
    timer, clock, fired = make_timer()
    clock.now_ms = 1_000  # and no poll since: the wheel's own clock is still at 0
    timer.add(Recorder("zero", 0, clock, fired))
    timer.add(Recorder("negative", -50, clock, fired))

    assert fired == [("zero", 1_000), ("negative", 1_000)]
    assert timer.size == 0


def test_task_due_within_a_lagging_clock_still_runs_at_the_next_poll() -> None:
    timer, clock, fired = make_timer()
    clock.now_ms = 5_000  # time passed without a poll: the wheel's clock is still at 0
    timer.add(Recorder("soon", 3, clock, fired))

    clock.now_ms = 5_002
    timer.poll()
    assert fired == []
    clock.now_ms = 5_003
    timer.poll()
    assert fired == [("soon", 5_003)]


def test_wheel_add_returns_false_for_an_expired_entry() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=100)
    assert wheel.add(TimerTaskEntry(TimerTask(0), 100)) is False
    assert wheel.add(TimerTaskEntry(TimerTask(0), 99)) is False
    assert wheel.add(TimerTaskEntry(TimerTask(0), 101)) is True
    assert wheel.size == 1


def test_wheel_add_returns_false_for_a_cancelled_entry() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    task = TimerTask(0)
    entry = TimerTaskEntry(task, 10)
    task.cancel()
    assert wheel.add(entry) is False


def test_wheel_rejects_a_wheel_that_cannot_turn() -> None:
    try:
        TimingWheel(tick_ms=0, wheel_size=20, start_ms=0)
    except ValueError as e:
        assert "tick_ms" in str(e)
    else:
        raise AssertionError("tick_ms=0 accepted")


def test_adding_a_task_again_moves_it() -> None:
    timer, clock, fired = make_timer()
    task = Recorder("moved", 10, clock, fired)
    timer.add(task)
    task.delay_ms = 30
    timer.add(task)
    assert timer.size == 1

    step_to(timer, clock, 40)
    assert fired == [("moved", 30)]


def test_failing_task_does_not_stop_the_others(caplog) -> None:
    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer, clock, fired = make_timer()
    timer.add(Boom(5))
    timer.add(Recorder("after", 5, clock, fired))

    clock.now_ms = 5
    assert timer.poll() == 2
    assert fired == [("after", 5)]
    assert "boom" in caplog.text


def test_tick_larger_than_one_ms_rounds_to_the_start_of_the_tick() -> None:
    clock = FakeClock(0)
    timer = Timer(clock=clock, tick_ms=10, wheel_size=8)
    fired: list = []
    timer.add(Recorder("t", 25, clock, fired))

    clock.now_ms = 19
    timer.poll()
    assert fired == []
    clock.now_ms = 20
    timer.poll()
    assert fired == [("t", 20)]


def test_many_timers_each_fire_exactly_at_their_deadline() -> None:
    rng = random.Random(7)
    timer, clock, fired = make_timer()
    delays = [rng.randrange(1, 20_000) for _ in range(20_000)]
    tasks = [Recorder(i, d, clock, fired) for i, d in enumerate(delays)]
    for task in tasks:
        timer.add(task)
    cancelled = set(rng.sample(range(len(tasks)), 5_000))
    for i in cancelled:
        tasks[i].cancel()
    assert timer.size == len(tasks) - len(cancelled)

    step_to(timer, clock, 20_000)

    assert timer.size == 0
    assert sorted(fired) == sorted((i, d) for i, d in enumerate(delays) if i not in cancelled)


# Each step: ("add", delay) | ("cancel", index of an added task) | ("advance", ms) then
# poll | ("sleep", ms): time passes and nobody polls.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(min_value=-5, max_value=10_000)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=1_000)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=3_000)),
        st.tuples(st.just("sleep"), st.integers(min_value=0, max_value=3_000)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps, wheel_size=st.integers(min_value=2, max_value=20))
def test_every_task_runs_at_the_first_poll_at_or_after_its_deadline(
    steps: list[tuple[str, int]], wheel_size: int
) -> None:
    clock = FakeClock(0)
    timer = Timer(clock=clock, tick_ms=1, wheel_size=wheel_size)
    fired: list = []
    tasks: list[Recorder] = []
    deadlines: dict[int, int] = {}
    expected: dict[int, int] = {}  # task -> clock time it must run at

    for action, value in steps + [("advance", 30_000)]:
        if action == "add":
            name = len(tasks)
            tasks.append(Recorder(name, value, clock, fired))
            deadlines[name] = clock.now_ms + value
            timer.add(tasks[name])
            if value <= 0:
                expected[name] = clock.now_ms
        elif action == "cancel" and tasks:
            name = value % len(tasks)
            if name not in expected:
                tasks[name].cancel()
                deadlines.pop(name, None)
        elif action == "sleep":
            clock.now_ms += value
        elif action == "advance":
            clock.now_ms += value
            timer.poll()
            for name, deadline in list(deadlines.items()):
                if name not in expected and deadline <= clock.now_ms:
                    expected[name] = clock.now_ms
        assert timer.size == sum(1 for n in deadlines if n not in expected)

    assert sorted(fired) == sorted(expected.items())
