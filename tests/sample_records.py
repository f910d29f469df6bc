"""Records worth comparing byte for byte, for the suites that produce them and read them back
(pulllog's producer, and aiokafka and kafka-python against the broker).

Each record is a dict of the keyword arguments aiokafka's and kafka-python's ``send`` take:
``key``, ``value``, ``headers`` and ``timestamp_ms``.
"""

from __future__ import annotations

import random
from typing import Any

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
"""Every codec a producer can name (None: uncompressed)."""

BASE_TIMESTAMP_MS = 1_700_000_000_000


def sample_records(count: int, *, keyed: bool = True, null_header_values: bool = False,
                   seed: int = 11) -> list[dict[str, Any]]:
    """Binary and compressible values, empty values, tombstones (keyed only), repeated and
    empty header keys, empty header values (and null ones with ``null_header_values``: not
    every client can send them), distinct timestamps ``BASE_TIMESTAMP_MS + 10 * i``."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        value: bytes | None
        if i % 5 == 0:
            value = rng.randbytes(rng.randrange(0, 300))
        elif i % 5 == 1:
            value = b"compressible " * rng.randrange(1, 60)
        elif i % 5 == 2:
            value = b""
        elif i % 5 == 3:
            value = None if keyed else b"-"  # a tombstone needs a key
        else:
            value = bytes(range(256))
        headers: list[tuple[str, bytes | None]] = [
            ("trace", b"%08d" % i), ("trace", b"again"), ("", b"\x00\xff"), ("empty", b"")
        ]
        if null_header_values:
            headers.append(("null", None))
        records.append({
            "key": (b"key-%d-" % (i % 4)) + rng.randbytes(3) if keyed else None,
            "value": value,
            "headers": headers[: i % (len(headers) + 1)],
            "timestamp_ms": BASE_TIMESTAMP_MS + 10 * i,
        })
    return records


def as_sent(record: dict[str, Any]) -> tuple[Any, ...]:
    """(key, value, headers, timestamp) of a sample record, to compare with what came back."""
    return record["key"], record["value"], tuple(record["headers"]), record["timestamp_ms"]


def as_received(message: Any) -> tuple[Any, ...]:
    """The same tuple for a record a client consumed (aiokafka's or kafka-python's)."""
    return message.key, message.value, tuple(message.headers), message.timestamp
