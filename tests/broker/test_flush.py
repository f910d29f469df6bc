"""flush.ms fsyncs run on a worker thread: a slow disk never stalls the event loop.

A gate around ``os.fsync`` holds the fsync of one partition's log file (the real fsync runs
once the gate opens, a delay fault as kfake injects one): while it is held, the broker still
answers other requests, and the partition's recovery point moves only once the fsync is done.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from pulllog import Producer
from pulllog.testing import BrokerThread
from waits import TIMEOUT_S, wait_until


class FsyncGate:
    """Holds every fsync of ``<partition dir>/*.log`` until ``release`` is set."""

    def __init__(self, partition_dir: str) -> None:
        self.partition_dir = partition_dir
        self.entered = threading.Event()
        self.release = threading.Event()
        self._real = os.fsync

    def fsync(self, fd: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if f"/{self.partition_dir}/" in path and path.endswith(".log"):
            self.entered.set()
            self.release.wait(TIMEOUT_S)
        self._real(fd)


def _recovery_point(broker: BrokerThread, topic: str) -> int:
    # Read from the test's thread on purpose: the broker's loop may be the thing that is stuck.
    return broker.broker.topics.partition_log(topic, 0).recovery_point  # type: ignore[union-attr]


async def test_a_slow_flush_ms_fsync_does_not_stall_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("slow-0")
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data", properties={"log.flush.scheduler.interval.ms": "50"}) as broker:
        broker.call(lambda: broker.broker.topics.create("slow", 1, {"flush.ms": "1"}))
        broker.call(lambda: broker.broker.topics.create("fast", 1))
        try:
            async with Producer(broker.bootstrap_servers, acks=1) as producer:
                await asyncio.wait_for(producer.send_and_wait("slow", b"to be flushed"), TIMEOUT_S)
                await wait_until(gate.entered.is_set, "the flush.ms fsync of slow-0 started")
                # The fsync is held: the loop must still answer a Produce to another topic.
                answered = await asyncio.wait_for(producer.send_and_wait("fast", b"meanwhile"), TIMEOUT_S)
                assert answered.offset == 0
                assert _recovery_point(broker, "slow") == 0  # not on disk yet, not claimed to be
        finally:
            gate.release.set()
        await wait_until(lambda: _recovery_point(broker, "slow") == 1, "the recovery point moved after the fsync")
