"""Which partition of a coordinator's internal topic holds a key, as Kafka computes it.

A group id's offsets and metadata live in one partition of ``__consumer_offsets``, a
transactional id's state in one partition of ``__transaction_state``; the broker leading that
partition is the key's coordinator (FindCoordinator). Kafka's rule, for both::

    partition = Utils.abs(key.hashCode()) % partitions

``String.hashCode`` runs over the string's UTF-16 code units (a character outside the Basic
Multilingual Plane counts as its two surrogates) with int32 overflow, and ``Utils.abs`` maps
``Integer.MIN_VALUE`` to 0 (Java's ``Math.abs`` would leave it negative). Any other formula
sends clients to a different coordinator than a Kafka broker would for the same data.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]

_INT32_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s``, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition (of ``partitions``) that holds ``key``: a group id or a transactional id."""
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
