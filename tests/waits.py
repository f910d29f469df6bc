"""Waiting on broker state instead of on time: the one place tests wait.

A test that must let something happen first (a long-poll Fetch parked in the purgatory, a
group gone to PreparingRebalance, a record appended) polls for that state here, with a
generous overall timeout, and fails naming the state it waited for. A fixed sleep either
wastes time or, on a loaded machine, is too short; a state wait is as short as it can be
and as long as it must be.

``wait_until`` is for asyncio tests, ``block_until`` for blocking ones. The probes below
read a broker's state on its own event loop when given the ``pulllog_broker`` fixture (a
:class:`~pulllog.testing.BrokerThread`), or directly when given a
:class:`~pulllog.broker.Broker` running in the test's loop.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulllog.broker import Broker
from pulllog.testing import BrokerThread

TIMEOUT_S = 60.0
_INTERVAL_S = 0.01


def _timed_out(what: str, timeout_s: float, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout_s:.0f} s waiting until {what} (last value: {last!r})")


async def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> Any:
    """Poll ``condition`` (a plain or async callable) until it returns something true; return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, value)
        await asyncio.sleep(_INTERVAL_S)


def block_until(condition: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S,
                interval_s: float = _INTERVAL_S) -> Any:
    """:func:`wait_until` for a test that blocks (no event loop of its own). A condition that
    sends a request (a heartbeat) may ask for a longer ``interval_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, value)
        time.sleep(interval_s)


def listening(port: int, proc: subprocess.Popen[bytes], log: Path | None = None) -> bool:
    """True once something accepts connections on 127.0.0.1:``port``; fails at once, with
    the process's log, if ``proc`` (the ``pulllog serve`` meant to listen there) has exited."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        assert proc.poll() is None, log.read_text() if log is not None else f"exited with {proc.returncode}"
        return False


def wait_for_listener(port: int, proc: subprocess.Popen[bytes], log: Path | None = None) -> None:
    """Block until ``pulllog serve`` (``proc``) accepts connections on ``port``."""
    block_until(lambda: listening(port, proc, log), f"pulllog serve listens on port {port}", interval_s=0.05)


# ---------------------------------------------------------------------------- broker state


BrokerLike = Broker | BrokerThread


def on_broker(broker: BrokerLike, read: Callable[[Broker], Any]) -> Any:
    """``read(broker)``, on the broker's event loop when it runs in a thread of its own."""
    if isinstance(broker, BrokerThread):
        assert broker.broker is not None, "the broker is not running"
        return broker.call(read, broker.broker)
    return read(broker)


def parked_fetches(broker: BrokerLike, topic: str, partition: int = 0) -> int:
    """Long-poll Fetches waiting in the purgatory for data on the partition."""
    return on_broker(broker, lambda b: b.fetch_purgatory.watched((topic, partition)))


def expired_fetches(broker: BrokerLike) -> int:
    """Long-poll Fetches answered because max_wait passed (not because data came), ever."""
    return on_broker(broker, lambda b: b.fetch_purgatory.num_expired)


def log_end_offset(broker: BrokerLike, topic: str, partition: int = 0) -> int:
    """The partition's log end offset; -1 while the topic does not exist."""
    def read(b: Broker) -> int:
        t = b.topics.topics.get(topic)
        return -1 if t is None else t.partitions[partition].log.log_end_offset
    return on_broker(broker, read)


def connection_count(broker: BrokerLike) -> int:
    """Client connections the broker holds open."""
    return on_broker(broker, lambda b: len(b.connections))


def group_state(broker: BrokerLike, group: str) -> str | None:
    """The group's state as Kafka names it ("PreparingRebalance", "Stable", ...), None if unknown."""
    def read(b: Broker) -> str | None:
        g = b.groups.groups.get(group)
        return None if g is None else g.state.value
    return on_broker(broker, read)


def group_generation(broker: BrokerLike, group: str) -> int:
    """The group's generation id (0 before its first rebalance completes; -1 if unknown)."""
    def read(b: Broker) -> int:
        g = b.groups.groups.get(group)
        return -1 if g is None else g.generation
    return on_broker(broker, read)


def expired_group_timers(broker: BrokerLike) -> int:
    """Rebalance-purgatory operations that reached their deadline (a session timeout, a join
    held for the rebalance timeout), ever."""
    return on_broker(broker, lambda b: b.group_purgatory.num_expired)


def group_members(broker: BrokerLike, group: str) -> int:
    """Members the coordinator counts in the group."""
    def read(b: Broker) -> int:
        g = b.groups.groups.get(group)
        return 0 if g is None else len(g.members)
    return on_broker(broker, read)


def awaiting_join(broker: BrokerLike, group: str) -> int:
    """Members whose JoinGroup the coordinator holds (parked until the rebalance completes)."""
    def read(b: Broker) -> int:
        g = b.groups.groups.get(group)
        return 0 if g is None else sum(1 for m in g.members.values() if m.awaiting_join)
    return on_broker(broker, read)


def session_timer(broker: BrokerLike, group: str, member_id: str) -> object | None:
    """The member's current session timer: each heartbeat (or join) replaces it, so a new one
    means the coordinator heard from the member since the last look."""
    def read(b: Broker) -> object | None:
        g = b.groups.groups.get(group)
        member = None if g is None else g.members.get(member_id)
        return None if member is None else member.heartbeat
    return on_broker(broker, read)
