"""The broker's lifecycle: every task it starts is owned by its task group and joined at shutdown.

``async with Broker()`` returns once clients can connect; leaving the block stops accepting,
lets each connection finish the request in hand, answers long polls at once (by closing their
connection: the purgatory cancels them), joins every task, then flushes each log and writes
its clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from pulllog.broker import Broker
from pulllog.log.checkpoint import read_offsets
from pulllog.log.clean_shutdown import CLEAN_SHUTDOWN_MARKER
from pulllog.net.build import build, request_class
from pulllog.net.protocol import encode_request


def long_poll_fetch(topic: str, partition: int, max_wait_ms: int) -> bytes:
    """A Fetch v12 frame for the end of an empty partition: it waits in the purgatory."""
    body = build(request_class("fetch", 12), {
        "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                    "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
    return encode_request(body, correlation_id=1, client_id="lifecycle-test")


async def until(condition, what: str) -> None:
    """Wait for broker state; the bound only turns a hang into a failure."""
    try:
        async with asyncio.timeout(10):
            while not condition():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_no_task_of_the_broker_outlives_async_with(tmp_path: Path) -> None:
    before = asyncio.all_tasks()
    async with Broker(tmp_path, host="127.0.0.1", port=0) as broker:
        during = asyncio.all_tasks() - before
        streams = [await asyncio.open_connection("127.0.0.1", broker.port) for _ in range(3)]
        await until(lambda: len(broker.connections) == 3, "three connections")
        connection_tasks = {c.task for c in broker.connections}
    assert during, "the broker runs its purgatory drivers and housekeeping as tasks"
    assert asyncio.all_tasks() == before
    assert all(t.done() for t in connection_tasks | during)
    for reader, writer in streams:
        assert await reader.read() == b""  # closed by the broker
        writer.close()


async def test_a_long_poll_in_progress_is_answered_at_shutdown_by_closing_its_connection(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pulllog.broker")
    before = asyncio.all_tasks()
    async with Broker(tmp_path, host="127.0.0.1", port=0) as broker:
        broker.topics.create("idle", 1)
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(long_poll_fetch("idle", 0, max_wait_ms=600_000))
        await until(lambda: broker.fetch_purgatory.watched(("idle", 0)) == 1, "the Fetch to wait in the purgatory")
    # Cancelled by the purgatory's shutdown: the connection closes with no answer, and not
    # because the shutdown's grace period ran out (which would log that it cancelled it).
    assert await reader.read() == b""
    writer.close()
    assert broker.fetch_purgatory.watched(("idle", 0)) == 0
    assert not [r for r in caplog.records if "still busy" in r.getMessage()]
    assert "stopped cleanly" in caplog.text
    assert ("idle", 0) in read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER)
    assert asyncio.all_tasks() == before


async def test_serve_reports_ready_then_returns_after_stop(tmp_path: Path) -> None:
    broker = Broker(tmp_path, host="127.0.0.1", port=0)
    ready: asyncio.Future[Broker] = asyncio.get_running_loop().create_future()
    async with asyncio.TaskGroup() as tg:
        serving = tg.create_task(broker.serve(ready=ready))
        assert await ready is broker
        assert broker.accepting and broker.port != 0
        _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        await until(lambda: len(broker.connections) == 1, "the connection")
        broker.stop()
    assert serving.done() and not broker.connections
    writer.close()


async def test_serve_puts_a_failure_to_listen_on_ready(tmp_path: Path) -> None:
    async with Broker(tmp_path / "first", host="127.0.0.1", port=0) as first:
        second = Broker(tmp_path / "second", host="127.0.0.1", port=first.port)
        ready: asyncio.Future[Broker] = asyncio.get_running_loop().create_future()
        with pytest.raises(OSError, match="cannot listen"):
            await second.serve(ready=ready)
        with pytest.raises(OSError, match="cannot listen"):
            ready.result()


async def test_an_error_in_the_block_propagates_as_it_is_after_a_full_shutdown(tmp_path: Path) -> None:
    before = asyncio.all_tasks()
    with pytest.raises(ZeroDivisionError):
        async with Broker(tmp_path, host="127.0.0.1", port=0) as broker:
            broker.topics.create("t", 1)
            _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            await until(lambda: len(broker.connections) == 1, "the connection")
            1 / 0
    writer.close()
    assert asyncio.all_tasks() == before
    assert ("t", 0) in read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER)


async def test_a_cancelled_broker_still_joins_its_tasks_and_writes_the_markers(tmp_path: Path) -> None:
    before = asyncio.all_tasks()
    started = asyncio.Event()

    streams = []

    async def run() -> None:
        async with Broker(tmp_path, host="127.0.0.1", port=0) as broker:
            broker.topics.create("t", 1)
            streams.append(await asyncio.open_connection("127.0.0.1", broker.port))
            await until(lambda: len(broker.connections) == 1, "the connection")
            started.set()
            await asyncio.Event().wait()  # until cancelled

    owner = asyncio.create_task(run())  # the task whose cancellation is under test
    await started.wait()
    owner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owner
    assert asyncio.all_tasks() == before  # the connection's task too: cancelled and joined
    assert ("t", 0) in read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER)
    for _reader, writer in streams:
        writer.close()
