#!/usr/bin/env python3
"""Micro-benchmark: the purgatory's timing wheel against asyncio's ``loop.call_later``.

Four scenarios on N timers (default 1,000,000), each timed with the real clock:

* insert + cancel: N timers with deadlines spread over 30 s, then every one cancelled.
  The common purgatory case: most Fetch and Produce requests complete before their
  timeout. The wheel unlinks the entry (O(1)); asyncio marks the handle cancelled
  and leaves it in its heap until the loop runs and cleans up.
* insert + expire: N timers with deadlines spread over 1 s; once all are due (the
  wait is not timed), one ``Timer.poll()`` / one loop iteration runs them all.
* purgatory: N ``DelayedOperation``s through ``try_complete_else_watch`` on 1,000
  keys, then completed by ``check_and_complete``: the whole per-request cost.

Each phase's time is the best of ``--repeat`` runs (the machine may be shared).
Peak memory is measured in one more run under tracemalloc, so it doesn't slow the
timed runs. Usage::

    python scripts/bench_timing_wheel.py [-n 1000000] [--repeat 3] [--no-memory]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import os
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pulllog.purgatory.delayed import DelayedOperation, DelayedOperationPurgatory  # noqa: E402
from pulllog.purgatory.timing_wheel import Timer, TimerTask  # noqa: E402

CANCEL_SPREAD_MS = 30_000
EXPIRE_SPREAD_MS = 1_000
PURGATORY_KEYS = 1_000


@dataclass(frozen=True)
class Result:
    name: str
    first_phase: str
    first_s: float
    second_phase: str
    second_s: float

    def ops_per_s(self, n: int, seconds: float) -> float:
        return n / seconds if seconds > 0 else float("inf")

    def best(self, other: Result) -> Result:
        return Result(
            self.name,
            self.first_phase,
            min(self.first_s, other.first_s),
            self.second_phase,
            min(self.second_s, other.second_s),
        )


Scenario = Callable[[int, random.Random], Result]


class CountingTask(TimerTask):
    __slots__ = ()
    fired = 0

    def run(self) -> None:
        CountingTask.fired += 1


class ReadyOp(DelayedOperation):
    """Completes as soon as someone checks it after `ready` is set."""

    __slots__ = ()
    ready = False

    def try_complete(self) -> bool:
        return self.force_complete() if ReadyOp.ready else False

    def on_complete(self) -> None:
        pass


def _noop() -> None:
    pass


def _delays(n: int, spread_ms: int, rng: random.Random) -> list[int]:
    return [rng.randrange(1, spread_ms + 1) for _ in range(n)]


def _sleep_until_due(deadline_s: float) -> None:
    time.sleep(max(0.0, deadline_s - time.monotonic()) + 0.005)


def wheel_insert_cancel(n: int, rng: random.Random) -> Result:
    delays = _delays(n, CANCEL_SPREAD_MS, rng)
    timer = Timer()
    t0 = time.perf_counter()
    tasks = [CountingTask(d) for d in delays]
    for task in tasks:
        timer.add(task)
    t1 = time.perf_counter()
    for task in tasks:
        task.cancel()
    t2 = time.perf_counter()
    assert timer.size == 0 and timer.next_expiration_ms() is None
    return Result("timing wheel", "insert", t1 - t0, "cancel", t2 - t1)


def asyncio_insert_cancel(n: int, rng: random.Random) -> Result:
    delays = [d / 1000 for d in _delays(n, CANCEL_SPREAD_MS, rng)]
    loop = asyncio.new_event_loop()
    try:
        t0 = time.perf_counter()
        handles = [loop.call_later(d, _noop) for d in delays]
        t1 = time.perf_counter()
        for handle in handles:
            handle.cancel()
        t2 = time.perf_counter()
    finally:
        loop.close()
    return Result("asyncio call_later", "insert", t1 - t0, "cancel", t2 - t1)


def wheel_insert_expire(n: int, rng: random.Random) -> Result:
    delays = _delays(n, EXPIRE_SPREAD_MS, rng)
    timer = Timer()
    CountingTask.fired = 0
    t0 = time.perf_counter()
    for d in delays:
        timer.add(CountingTask(d))
    t1 = time.perf_counter()
    _sleep_until_due(time.monotonic() + EXPIRE_SPREAD_MS / 1000)
    t2 = time.perf_counter()
    timer.poll()
    t3 = time.perf_counter()
    assert CountingTask.fired == n and timer.size == 0
    return Result("timing wheel", "insert", t1 - t0, "expire", t3 - t2)


def asyncio_insert_expire(n: int, rng: random.Random) -> Result:
    delays = [d / 1000 for d in _delays(n, EXPIRE_SPREAD_MS, rng)]
    loop = asyncio.new_event_loop()
    try:
        done = loop.create_future()
        fired = 0

        def callback() -> None:
            nonlocal fired
            fired += 1
            if fired == n:
                done.set_result(None)

        t0 = time.perf_counter()
        for d in delays:
            loop.call_later(d, callback)
        t1 = time.perf_counter()
        _sleep_until_due(loop.time() + EXPIRE_SPREAD_MS / 1000)
        t2 = time.perf_counter()
        loop.run_until_complete(done)
        t3 = time.perf_counter()
    finally:
        loop.close()
    return Result("asyncio call_later", "insert", t1 - t0, "expire", t3 - t2)


def purgatory_watch_complete(n: int, rng: random.Random) -> Result:
    delays = _delays(n, CANCEL_SPREAD_MS, rng)
    keys = [rng.randrange(PURGATORY_KEYS) for _ in range(n)]
    purgatory: DelayedOperationPurgatory[int, ReadyOp] = DelayedOperationPurgatory("bench")
    ReadyOp.ready = False
    t0 = time.perf_counter()
    for d, key in zip(delays, keys):
        purgatory.try_complete_else_watch(ReadyOp(d), (key,))
    t1 = time.perf_counter()
    ReadyOp.ready = True
    completed = sum(purgatory.check_and_complete(key) for key in range(PURGATORY_KEYS))
    t2 = time.perf_counter()
    assert completed == n and purgatory.num_delayed == 0
    return Result("purgatory", "watch", t1 - t0, "complete", t2 - t1)


SCENARIOS: list[tuple[str, Scenario]] = [
    ("insert + cancel", wheel_insert_cancel),
    ("insert + cancel", asyncio_insert_cancel),
    ("insert + expire", wheel_insert_expire),
    ("insert + expire", asyncio_insert_expire),
    ("watch + complete", purgatory_watch_complete),
]


def peak_mib(scenario: Scenario, n: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        scenario(n, random.Random(1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def run_best(scenario: Scenario, n: int, repeat: int) -> Result:
    best: Result | None = None
    for _ in range(max(1, repeat)):
        gc.collect()
        r = scenario(n, random.Random(1))
        best = r if best is None else best.best(r)
    assert best is not None
    return best


def machine() -> str:
    return (
        f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="timers per scenario")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per scenario (best kept)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    args = parser.parse_args()
    n: int = args.n

    print(f"pulllog timing wheel benchmark: {n:,} timers per scenario, best of {args.repeat}")
    print(f"machine: {machine()}")
    print(f"date:    {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print()
    header = (
        f"{'scenario':<17} {'implementation':<19} {'phase 1':>20} {'phase 2':>22}"
        f" {'both ops/s':>11} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for label, scenario in SCENARIOS:
        r = run_best(scenario, n, args.repeat)
        mem = "-" if args.no_memory else f"{peak_mib(scenario, n):.0f}"
        first = f"{r.first_phase} {r.ops_per_s(n, r.first_s):>11,.0f}/s"
        second = f"{r.second_phase} {r.ops_per_s(n, r.second_s):>11,.0f}/s"
        both = r.ops_per_s(n, r.first_s + r.second_s)
        print(f"{label:<17} {r.name:<19} {first:>20} {second:>22} {both:>11,.0f} {mem:>9}")
    print()
    print("ops/s: timers (or operations) per second of the phase, best run;"
          " 'both' = N / (phase 1 + phase 2).")
    print("peak MiB: tracemalloc peak of one extra run, timer objects and their handles included.")


if __name__ == "__main__":
    main()
