"""The broker's accept loop, which backs off when the process runs out of descriptors.

asyncio's own server (``loop.create_server``) logs every failed ``accept()`` with a
traceback, and on EMFILE it does so up to ``backlog`` times per wake-up (1,024 here), each
time scheduling another retry: at the descriptor limit a broker spent half a core writing
hundreds of tracebacks a second. This loop does what Kafka's acceptor needs and no more:

* Accept up to ``_ACCEPT_BATCH`` pending connections per wake-up, each handed to
  ``loop.connect_accepted_socket`` with the broker's protocol.
* On EMFILE, ENFILE, ENOBUFS or ENOMEM, stop watching the listening socket and look again
  after ``retry_s``: pending clients wait in the listen backlog meanwhile, and are accepted
  as soon as descriptors return (a connection or a segment file closed).
* Say so in one WARNING line (no traceback) at most once per ``log_interval_s``, with how
  many accepts failed since the last line, and one INFO line once accepting works again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable

__all__ = ["Listener", "listen_sockets"]

log = logging.getLogger(__name__)

_ACCEPT_BATCH = 64
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_TRANSIENT = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


def listen_sockets(host: str, port: int, backlog: int = 1024) -> list[socket.socket]:
    """Non-blocking listening sockets on every address ``host`` resolves to (as asyncio's
    create_server binds them: "localhost" may be 127.0.0.1 and ::1). Port 0 picks a free
    port with the first address and uses it for the others."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _name, address in infos:
            if (family, address[0]) in seen:
                continue
            seen.add((family, address[0]))
            if sockets and port == 0:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(_listen(family, kind, proto, address, backlog))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _listen(family: int, kind: int, proto: int, address: tuple, backlog: int) -> socket.socket:  # type: ignore[type-arg]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """Accepts connections on ``sock`` for ``protocol_factory`` until :meth:`close`."""

    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol], *,
                 retry_s: float = 1.0, log_interval_s: float = 10.0) -> None:
        self.sock = sock
        self._factory = protocol_factory
        self._retry_s = retry_s
        self._log_interval_s = log_interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._closed = False
        self._failed_since_log = 0
        self._last_log = -float("inf")
        self._resumed_log_due = False
        self.backoffs = 0  # times accepting stopped for lack of descriptors (tests, metrics)
        self.warnings_logged = 0

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def backing_off(self) -> bool:
        return self._retry is not None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
        for task in self._pending:
            task.cancel()
        self.sock.close()

    def _accept(self) -> None:
        assert self._loop is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._back_off(exc)
                    return
                if exc.errno in _TRANSIENT:  # the client went before we took it
                    continue
                log.warning("accept() on %s failed: %s", self.sock.getsockname(), exc)
                return
            if self._resumed_log_due:
                self._resumed_log_due = False
                log.info("accepting connections again")
            conn.setblocking(False)
            task = self._loop.create_task(self._connect(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:
            conn.close()
            log.warning("could not set up an accepted connection: %s", exc)
        except BaseException:
            conn.close()
            raise

    def _back_off(self, exc: OSError) -> None:
        assert self._loop is not None
        self.backoffs += 1
        self._failed_since_log += 1
        self._resumed_log_due = True
        self._loop.remove_reader(self.sock.fileno())
        self._retry = self._loop.call_later(self._retry_s, self._resume)
        now = time.monotonic()
        if now - self._last_log >= self._log_interval_s:
            log.warning("cannot accept connections: %s (%d time(s) since the last report); new clients wait "
                        "in the listen backlog, retrying every %.0f s; raise `ulimit -n` or lower "
                        "log.max.open.files", exc.strerror or exc, self._failed_since_log, self._retry_s)
            self.warnings_logged += 1
            self._last_log = now
            self._failed_since_log = 0

    def _resume(self) -> None:
        self._retry = None
        if self._closed or self._loop is None:
            return
        self._loop.add_reader(self.sock.fileno(), self._accept)
