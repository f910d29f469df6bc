"""A data watch whose re-reads do not block kazoo's callback thread (partition states).

kazoo's ``DataWatch`` re-reads its znode with a blocking ``get`` on kazoo's one callback
thread each time its watch fires. When the controller writes the states of many partitions
in one transaction (a broker's death), every broker's watches on them fire together, and
the reads queue behind each other: one ZooKeeper round trip each, and each round trip several
hand-overs between kazoo's threads and the broker's event loop, which share one interpreter
lock. The last partition's new leader was applied hundreds of milliseconds after the first
(50 partitions of ``__consumer_offsets`` on a loaded machine).

:class:`PipelinedDataWatch` keeps DataWatch's contract for what it is used for here, and
issues each re-read with ``get_async``: the reads of all the partitions go out together and
their answers come back in one round trip, each handed to ``func`` on kazoo's completion
thread as it arrives.

- The first read is a blocking one, as DataWatch's: the caller finds the znode's value
  delivered when the constructor returns.
- ``func(data, stat)`` gets the znode's data and stat, or ``(None, None)`` while it does not
  exist (an ``exists`` watch then waits for its creation). It is called when the znode's
  ``mzxid`` differs from the one last delivered; returning False ends the watch.
- After a lost connection or session (a lost session loses its watches), the znode is read
  again when the client is connected.
- Answers for one znode arrive in the order of its reads (one connection, one completion
  thread), and a watch fires once per arming, so at most one read per znode is in flight
  apart from a reconnection's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError

__all__ = ["PipelinedDataWatch"]

log = logging.getLogger("pulllog.cluster")

DataFunc = Callable[[bytes | None, Any], bool | None]


class PipelinedDataWatch:
    """Watch ``path``; ``func`` is called with each new value (module docstring)."""

    def __init__(self, client: KazooClient, path: str, func: DataFunc) -> None:
        self._client = client
        self._path = path
        self._func = func
        self._lock = threading.Lock()  # one delivery at a time, in order
        self._stopped = False
        self._delivered = False
        self._mzxid: int | None = None
        client.add_listener(self._on_session_state)
        try:
            data, stat = client.get(path, watch=self._watcher)
        except NoNodeError:
            if client.exists(path, watch=self._watcher) is not None:  # created in between
                self._read()
                return
            data, stat = None, None
        self._deliver(data, stat)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _read(self) -> None:
        if not self._stopped:
            self._client.get_async(self._path, watch=self._watcher).rawlink(self._got)

    def _got(self, result: Any) -> None:
        try:
            data, stat = result.get()
        except NoNodeError:
            if not self._stopped:
                self._client.exists_async(self._path, watch=self._watcher).rawlink(self._existed)
            return
        except KazooException as exc:  # connection trouble: read again once connected
            log.debug("reading %s failed: %s", self._path, exc)
            return
        self._deliver(data, stat)

    def _existed(self, result: Any) -> None:
        try:
            stat = result.get()
        except KazooException as exc:
            log.debug("checking %s failed: %s", self._path, exc)
            return
        if stat is not None:  # created between the read and the check
            self._read()
        else:
            self._deliver(None, None)

    def _watcher(self, _event: object) -> None:
        self._read()

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._read()

    def _deliver(self, data: bytes | None, stat: Any) -> None:
        with self._lock:
            mzxid = getattr(stat, "mzxid", None)
            if self._stopped or (self._delivered and mzxid == self._mzxid):
                return
            self._delivered, self._mzxid = True, mzxid
            try:
                keep = self._func(data, stat)
            except Exception:  # a bug in func: logged; the watch goes on
                log.exception("the watch on %s failed", self._path)
                return
            if keep is False:
                self._stopped = True
                self._client.remove_listener(self._on_session_state)
