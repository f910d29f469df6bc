"""Shared pieces of the consumer group tests: topics, numbered records, and an ownership log.

Every record these tests produce is numbered by its partition and offset, so "no gap" is a
set comparison: the union of what the members consumed (or processed) must equal every
(partition, offset) in the topic.

:class:`Ownership` collects what each member's rebalance callbacks reported, keyed by the
generation the member was in. A consumer group's promise is that in a generation each
partition has exactly one owner (disjoint), and once the group is stable every partition is
owned (complete).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 60.0
# The broker's minimum session timeout: a killed member is noticed within about six seconds.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000

CONFLUENT_GROUP_TIMINGS = {
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    # also the rebalance timeout: how long a join waits for a member that is still alive
    "max.poll.interval.ms": 30000,
}

CRASH_MEMBER = Path(__file__).parent / "group" / "crash_member.py"


# ---------------------------------------------------------------------------- topics and records


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its future is done
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT_S)


def produce_numbered(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[tuple[int, int]]:
    """``per_partition`` records into each partition, value ``b"<partition>:<n>"``; returns
    every (partition, offset) written."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures: list[Any] = []
    for n in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, f"{p}:{n}".encode(), partition=p,
                             on_delivery=lambda err, _msg: failures.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, "records were still in flight"
    assert not failures, failures
    return {(p, o) for p in range(partitions) for o in range(per_partition)}


def numbered_topic(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[tuple[int, int]]:
    create_topic(bootstrap, topic, partitions)
    return produce_numbered(bootstrap, topic, partitions, per_partition)


# ---------------------------------------------------------------------------- consumer protocol


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, (topic, partitions) pairs, user data (null)."""
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def librdkafka_generation(consumer: Any) -> int:
    """The generation librdkafka's consumer is in: its serialized group metadata is
    ``b"CGMDv2:"`` followed by the generation id (int32, host byte order)."""
    blob = bytes(consumer.consumer_group_metadata())
    assert blob.startswith(b"CGMDv2:"), blob
    return int(struct.unpack_from("=i", blob, 7)[0])


# ---------------------------------------------------------------------------- ownership


@dataclass
class Ownership:
    """What each member held after each of its assignments, by generation.

    ``assigned`` with ``incremental=True`` adds (cooperative protocols); otherwise it
    replaces (eager protocols: everything was revoked before the rejoin).
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_generation: dict[int, dict[str, frozenset[int]]] = field(default_factory=lambda: defaultdict(dict))
    timeline: list[tuple[float, str, str, int, tuple[int, ...]]] = field(default_factory=list)

    def assigned(self, member: str, generation: int, partitions: Iterable[int], *, incremental: bool = False) -> None:
        parts = set(partitions)
        with self.lock:
            if incremental:
                self.held[member] |= parts
            else:
                self.held[member] = parts
            self.by_generation[generation][member] = frozenset(self.held[member])
            self.timeline.append((time.monotonic(), member, "assigned", generation, tuple(sorted(parts))))

    def revoked(self, member: str, partitions: Iterable[int]) -> None:
        parts = set(partitions)
        with self.lock:
            self.held[member] -= parts
            self.timeline.append((time.monotonic(), member, "revoked", -1, tuple(sorted(parts))))

    def gone(self, member: str) -> None:
        """The member died without revoking (killed): it owns nothing from now on."""
        with self.lock:
            self.held.pop(member, None)
            self.timeline.append((time.monotonic(), member, "gone", -1, ()))

    def holdings(self) -> dict[str, frozenset[int]]:
        with self.lock:
            return {m: frozenset(p) for m, p in self.held.items()}

    def latest_generation(self) -> int:
        with self.lock:
            return max(self.by_generation, default=-1)

    def generation(self, generation: int) -> dict[str, frozenset[int]]:
        with self.lock:
            return dict(self.by_generation.get(generation, {}))

    def owners_in(self, generation: int) -> dict[int, list[str]]:
        owners: dict[int, list[str]] = defaultdict(list)
        for member, parts in self.generation(generation).items():
            for p in parts:
                owners[p].append(member)
        return owners

    def stable_with(self, members: Iterable[str], partitions: int) -> int | None:
        """The latest generation if every one of ``members`` (and nobody else) reported an
        assignment in it and together they own every partition; else None."""
        generation = self.latest_generation()
        reported = self.generation(generation)
        if set(reported) != set(members):
            return None
        owned = set().union(*reported.values()) if reported else set()
        return generation if owned == set(range(partitions)) else None

    def latest(self) -> tuple[int, dict[str, frozenset[int]]]:
        """The latest generation and what each member reported in it."""
        generation = self.latest_generation()
        return generation, self.generation(generation)

    def assert_one_owner_per_partition(self, partitions: int, *, complete: Callable[[int], bool] | None = None) -> None:
        """In every generation no partition has two owners, and in the generations
        ``complete`` names every partition has an owner. By default that is every generation
        (what an eager protocol promises) except one in which the leader assigned nothing at
        all before the last: that is not one the broker got wrong, as aiokafka and
        kafka-python leaders may assign before their first metadata lists the topic, then
        rejoin at once. Such a generation is only checked for double owners."""
        with self.lock:
            generations = sorted(self.by_generation)
        assert generations, "no member reported an assignment"
        for g in generations:
            owners = self.owners_in(g)
            doubled = {p: ms for p, ms in owners.items() if len(ms) > 1}
            assert not doubled, f"generation {g}: partitions with two owners {doubled}; timeline {self.timeline}"
            if complete(g) if complete is not None else bool(owners) or g == generations[-1]:
                missing = set(range(partitions)) - set(owners)
                assert not missing, f"generation {g}: partitions nobody owns {sorted(missing)}; timeline {self.timeline}"


@dataclass
class Consumed:
    """(partition, offset) pairs consumed, by member."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_member: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, member: str, partition: int, offset: int) -> None:
        with self.lock:
            self.by_member[member].append((partition, offset))

    def union(self) -> set[tuple[int, int]]:
        with self.lock:
            return {po for pos in self.by_member.values() for po in pos}

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.by_member.values())


# ---------------------------------------------------------------------------- a member in its own process


class MemberProcess:
    """A confluent-kafka consumer in a child process (tests/group/crash_member.py), so that
    it can be killed with SIGKILL: no LeaveGroup, no commit, no goodbye. Its events arrive as
    JSON lines: ``assigned`` / ``revoked`` (with generation and partitions) and
    ``processed`` / ``committed`` (with partition and offset)."""

    def __init__(self, name: str, config: dict[str, Any], topic: str, *, ownership: Ownership | None = None,
                 commit_every: int = 0, process_delay_s: float = 0.0) -> None:
        self.name = name
        self.ownership = ownership
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        spec = {"name": name, "config": config, "topic": topic, "commit_every": commit_every,
                "process_delay_s": process_delay_s}
        self.proc = subprocess.Popen([sys.executable, str(CRASH_MEMBER), json.dumps(spec)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, name=f"reader-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if self.ownership is not None:
                if event["event"] == "assigned":
                    self.ownership.assigned(self.name, event["generation"], event["partitions"],
                                            incremental=event["incremental"])
                elif event["event"] == "revoked":
                    self.ownership.revoked(self.name, event["partitions"])
            with self.lock:
                self.events.append(event)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]

    def kill(self) -> None:
        """SIGKILL: the member vanishes mid-whatever-it-was-doing."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        if self.ownership is not None:
            self.ownership.gone(self.name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()
