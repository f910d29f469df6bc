"""A TCP proxy between a client and a broker that loses Produce requests or their answers.

Most tests inject such faults in the broker itself (``broker.faults``). This proxy stays for
the in-flight tests (tests/client/test_producer_in_flight.py) because it also measures how
many Produce requests the client had in flight, sent and not yet answered, on the wire: the
broker cannot see that, since it reads and answers a connection's requests one at a time
and a request still in the socket buffers is invisible to it.
"""

from __future__ import annotations

import socket
import threading


class LossyProxy:
    """A TCP proxy in front of the broker that loses the first ``drops`` of every ``every``-th
    Produce request.

    ``lose="answer"``: forwards the request but cuts the connection instead of forwarding the
    answer: the batches are in the log, the producer does not know it and must retry.
    ``lose="request"``: drops the request and forwards the ones after it: the broker sees a
    gap (an idempotent producer's later batches get OUT_OF_ORDER_SEQUENCE_NUMBER), and the
    producer hears nothing until its request_timeout_ms.

    ``max_outstanding`` is the most Produce requests forwarded and not yet answered at once
    on one connection: how many the producer had in flight.

    ``hold_first=True``: the first connection is accepted and held, neither forwarded nor
    answered (``held`` is set), until ``release()`` closes it: a connection attempt that
    fails late, while the client has more to send."""

    def __init__(self, broker_port: int, every: int, drops: int, lose: str = "answer", *,
                 hold_first: bool = False) -> None:
        assert lose in ("answer", "request")
        self.broker_port, self.every, self.drops_left, self.lose = broker_port, every, drops, lose
        self._hold_first = hold_first
        self.held: socket.socket | None = None
        self.produce_requests = 0
        self.dropped = 0
        self.max_outstanding = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._spawn(self._accept)

    def _spawn(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self._hold_first:
                self._hold_first = False
                self._sockets.append(client)
                self.held = client
                continue
            upstream = socket.create_connection(("127.0.0.1", self.broker_port))
            self._sockets += [client, upstream]
            doomed: set[int] = set()
            outstanding: set[int] = set()
            self._spawn(self._requests, client, upstream, doomed, outstanding)
            self._spawn(self._responses, upstream, client, doomed, outstanding)

    @staticmethod
    def _frame(sock) -> bytes | None:  # type: ignore[no-untyped-def]
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        size = int.from_bytes(head, "big")
        body = bytearray()
        while len(body) < size:
            chunk = sock.recv(min(1 << 16, size - len(body)))
            if not chunk:
                return None
            body += chunk
        return head + bytes(body)

    def _requests(self, src, dst, doomed: set[int], outstanding: set[int]) -> None:  # type: ignore[no-untyped-def]
        try:
            while (frame := self._frame(src)) is not None:
                api_key = int.from_bytes(frame[4:6], "big")
                correlation_id = int.from_bytes(frame[8:12], "big")
                if api_key == 0:
                    with self._lock:
                        self.produce_requests += 1
                        if self.drops_left and self.produce_requests % self.every == 0:
                            self.drops_left -= 1
                            if self.lose == "request":
                                self.dropped += 1
                                continue  # never reaches the broker
                            doomed.add(correlation_id)
                        outstanding.add(correlation_id)
                        self.max_outstanding = max(self.max_outstanding, len(outstanding))
                dst.sendall(frame)
        except OSError:
            pass
        finally:
            _close(src, dst)

    def _responses(self, src, dst, doomed: set[int], outstanding: set[int]) -> None:  # type: ignore[no-untyped-def]
        try:
            while (frame := self._frame(src)) is not None:
                correlation_id = int.from_bytes(frame[4:8], "big")
                with self._lock:
                    outstanding.discard(correlation_id)
                if correlation_id in doomed:
                    with self._lock:
                        self.dropped += 1
                    return  # the answer is lost with the connection
                dst.sendall(frame)
        except OSError:
            pass
        finally:
            _close(src, dst)

    def release(self) -> None:
        """Close the held first connection (the client sees it end unanswered)."""
        if self.held is not None:
            _close(self.held)

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for sock in self._sockets:
            _close(sock)
        for t in self._threads:
            t.join(5)


def _close(*socks) -> None:  # type: ignore[no-untyped-def]
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
