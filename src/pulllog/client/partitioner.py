"""Which partition a produced record goes to.

Rules, in the order the producer applies them:

1. an explicit ``partition=`` wins;
2. a record with a key goes to ``toPositive(murmur2(key)) % numPartitions``: the Java
   client's ``Utils.murmur2`` (seed 0x9747b28c) and ``Utils.toPositive`` (``h & 0x7fffffff``),
   which librdkafka's ``murmur2_random`` partitioner also implements, so a key lands on the
   same partition whichever of these clients produced it; the count is of *all* partitions,
   available or not, so the mapping does not move while a leader is away;
3. a record without a key goes where the null-key strategy says:

   * ``"sticky"`` (the default, KIP-480): stay on one partition until the batch being filled
     for it is closed (full, or drained by the sender), then move to another partition
     chosen at random among those with a leader. Records without keys then form large
     batches instead of one small batch per partition per request;
   * ``"round_robin"``: each record to the next available partition in turn.

A callable ``partitioner(key, all_partitions, available_partitions) -> int`` (the signature
aiokafka and kafka-python use) replaces rules 2 and 3.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = [
    "CallablePartitioner",
    "Partitioner",
    "PartitionerCallable",
    "RoundRobinPartitioner",
    "StickyPartitioner",
    "make_partitioner",
    "murmur2",
    "murmur2_partition",
]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF

PartitionerCallable = Callable[[bytes | None, Sequence[int], Sequence[int]], int]


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2, 32 bits, as a signed Java int."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    if words:
        # Java assembles each 4-byte group little-endian: data[i] is the low byte.
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = words << 2
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner(Protocol):
    def partition(self, topic: str, key: bytes | None, all_partitions: Sequence[int],
                  available: Sequence[int]) -> int: ...

    def batch_closed(self, topic: str, partition: int, all_partitions: Sequence[int],
                     available: Sequence[int]) -> None: ...


class StickyPartitioner:
    """Keys by murmur2; null keys stick to one partition per topic until its batch closes."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        # topic -> its sticky partition (read, never written, by the producer: a batch that
        # closes elsewhere needs no call to batch_closed, which would change nothing)
        self.sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, all_partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        if key is not None:
            return murmur2_partition(key, len(all_partitions))
        current = self.sticky.get(topic)
        if current is None:
            current = self.sticky[topic] = self._rng.choice(available or all_partitions)
        return current

    def batch_closed(self, topic: str, partition: int, all_partitions: Sequence[int],
                     available: Sequence[int]) -> None:
        if self.sticky.get(topic) != partition:
            return  # a keyed or explicit batch closed: the sticky choice stands
        others = [p for p in (available or all_partitions) if p != partition]
        self.sticky[topic] = self._rng.choice(others) if others else partition


class RoundRobinPartitioner:
    """Keys by murmur2; null keys to each available partition in turn."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, all_partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        if key is not None:
            return murmur2_partition(key, len(all_partitions))
        choices = available or all_partitions
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        return choices[n % len(choices)]

    def batch_closed(self, topic: str, partition: int, all_partitions: Sequence[int],
                     available: Sequence[int]) -> None:
        pass


class CallablePartitioner:
    """Adapts ``fn(key, all_partitions, available_partitions) -> int``."""

    def __init__(self, fn: PartitionerCallable) -> None:
        self._fn = fn

    def partition(self, topic: str, key: bytes | None, all_partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        return self._fn(key, all_partitions, available)

    def batch_closed(self, topic: str, partition: int, all_partitions: Sequence[int],
                     available: Sequence[int]) -> None:
        pass


def make_partitioner(spec: str | PartitionerCallable | Partitioner) -> Partitioner:
    if isinstance(spec, str):
        name = spec.strip().lower().replace("-", "_")
        if name in ("sticky", "default", "murmur2_random"):
            return StickyPartitioner()
        if name in ("round_robin", "roundrobin"):
            return RoundRobinPartitioner()
        raise ValueError(f"unknown partitioner {spec!r}; use 'sticky', 'round_robin' or a callable "
                         "fn(key, all_partitions, available_partitions) -> int")
    if hasattr(spec, "partition") and hasattr(spec, "batch_closed"):
        return spec  # type: ignore[return-value]
    if callable(spec):
        return CallablePartitioner(spec)
    raise TypeError(f"partitioner must be 'sticky', 'round_robin' or a callable, not {type(spec).__name__}")
