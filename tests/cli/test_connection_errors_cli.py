"""What a client command says when --bootstrap-server is wrong: one line naming the mistake."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

PULLLOG = [sys.executable, "-m", "pulllog.cli.main"]


def topic_list(bootstrap: str) -> tuple[int, list[str]]:
    result = subprocess.run([*PULLLOG, "topic", "list", "--bootstrap-server", bootstrap],
                            capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, result.stderr.splitlines()


@pytest.fixture
def web_server() -> Iterator[int]:
    """A port that answers like a web server: an HTTP error for whatever arrives, then close."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(10)


def test_a_host_that_does_not_resolve_says_so() -> None:
    code, lines = topic_list("nohost.invalid:9092")
    assert code == 1 and len(lines) == 1
    assert "the host 'nohost.invalid' does not resolve" in lines[0] and "unknown error" not in lines[0].lower()


def test_a_port_that_is_not_kafka_says_not_a_kafka_broker(web_server: int) -> None:
    code, lines = topic_list(f"127.0.0.1:{web_server}")
    assert code == 1 and len(lines) == 1
    assert f"127.0.0.1:{web_server} is not a Kafka broker" in lines[0] and "expected bytes" not in lines[0]
