"""Test a Kafka application against a real broker in pytest: no JVM, no Docker.

pulllog registers this module as a pytest plugin, so with pulllog installed a test can ask
for the ``pulllog_broker`` fixture::

    def test_my_app(pulllog_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers})
        ...

The broker runs in a background thread with its own event loop, so it serves blocking
clients (confluent-kafka, kafka-python) and asyncio clients (aiokafka, pulllog's own)
alike. Each test gets a fresh broker with an empty data directory on a free port; it is
stopped cleanly when the test ends. ``BrokerThread`` is the same thing outside pytest.

To see how an application copes with a misbehaving broker, inject faults through
``pulllog_broker.faults`` (see :mod:`pulllog.broker.faults`)::

    rule = pulllog_broker.faults.fail(0, 6, topic="orders", times=3)  # Produce: NOT_LEADER_OR_FOLLOWER
    ...                                                                # the producer retries
    assert rule.fired == 3
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .broker import Broker

if TYPE_CHECKING:
    from .broker.faults import Faults

__all__ = ["BrokerThread", "pulllog_broker"]


class BrokerThread:
    """A broker on 127.0.0.1 in a daemon thread; ``start()`` returns once it listens."""

    def __init__(self, data_dir: str | Path | None = None, **options: Any) -> None:
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="pulllog-")
        self.data_dir = Path(data_dir if data_dir is not None else self._tmp.name)  # type: ignore[union-attr]
        options.setdefault("port", 0)
        options.setdefault("host", "127.0.0.1")
        self.options = options
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="pulllog-broker", daemon=True)

    @property
    def bootstrap_servers(self) -> str:
        assert self.broker is not None, "the broker is not running"
        return self.broker.bootstrap_servers

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    @property
    def faults(self) -> Faults:
        """The broker's injected faults (:mod:`pulllog.broker.faults`), e.g.
        ``pulllog_broker.faults.fail(0, 6, topic="t", times=3)``; safe to call from the test's thread."""
        assert self.broker is not None, "the broker is not running"
        return self.broker.faults

    def start(self, timeout: float = 30.0) -> "BrokerThread":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the broker did not start within {timeout} s")
        if self._error is not None:
            raise self._error
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start()'s caller
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.broker = Broker(data_dir=self.data_dir, **self.options)
        ready: asyncio.Future[Broker] = self._loop.create_future()
        ready.add_done_callback(self._on_ready)
        await self.broker.serve(ready=ready)  # returns after stop(), once shut down cleanly

    def _on_ready(self, ready: "asyncio.Future[Broker]") -> None:
        # A failure to start reaches start()'s caller from _main, with its error.
        if not ready.cancelled() and ready.exception() is None:
            self._ready.set()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's event loop thread and return its result."""
        assert self._loop is not None
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:
                box.append((False, exc))
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 30.0) -> None:
        if self.broker is not None and self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.broker.stop)
            self._thread.join(timeout)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "BrokerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@pytest.fixture
def pulllog_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A fresh pulllog broker for one test; ``.bootstrap_servers`` is what clients need."""
    with BrokerThread(tmp_path / "pulllog-data") as handle:
        yield handle
