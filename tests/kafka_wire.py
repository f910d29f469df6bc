"""A minimal blocking Kafka-protocol client for poking the broker with exact bytes."""

from __future__ import annotations

import itertools
import select
import socket
import struct
from typing import Any

from pulllog.net.build import build, request_class, response_class
from pulllog.net.protocol import decode_response, encode_request

_corr = itertools.count(1)


class WireClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, client_id: str = "wire-test") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self.topics_seen: set[str] = set()  # topics this client asked metadata for

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def call(self, api: str, version: int, data: dict[str, Any]) -> Any:
        correlation_id = self.send(api, version, data)
        got_id, response = self.receive(api, version)
        assert got_id == correlation_id
        return response

    def send(self, api: str, version: int, data: dict[str, Any]) -> int:
        """Send a request without reading its answer (to pipeline); returns its correlation id."""
        correlation_id = next(_corr)
        body = build(request_class(api, version), data)
        self.send_raw(encode_request(body, correlation_id=correlation_id, client_id=self.client_id))
        return correlation_id

    def receive(self, api: str, version: int) -> tuple[int, Any]:
        """The next answer on the connection, as (correlation id, response)."""
        return decode_response(self.read_frame(), response_class(api, version))

    def has_answer(self) -> bool:
        """Bytes of an answer are waiting to be read now (a state check: never waits)."""
        return bool(select.select([self.sock], [], [], 0)[0])


def produce(client: WireClient, topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
    """A Produce v9 request, after a Metadata request for a topic not seen yet, as a real
    producer does (Metadata is what auto-creates topics, as in Kafka)."""
    if topic not in client.topics_seen:
        client.topics_seen.add(topic)
        client.call("metadata", 12, {"topics": [{"name": topic, "topic_id": None}],
                                     "allow_auto_topic_creation": True,
                                     "include_topic_authorized_operations": False})
    return client.call("produce", 9, produce_request(topic, partition, records, acks))


def produce_request(topic: str, partition: int, records: bytes, acks: int = 1) -> dict[str, Any]:
    """A Produce v9 request's fields, for one partition."""
    return {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def fetch(client: WireClient, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
          min_bytes: int = 1, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20) -> Any:
    return client.call("fetch", 12, {
        "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                    "partition_max_bytes": partition_max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
