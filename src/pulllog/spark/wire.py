"""Reading offset ranges over the Kafka wire, for code that is not asyncio (Spark tasks, pyarrow).

Everything a Spark executor or the export needs from a broker, as plain functions:

- ``describe(bootstrap, topics)``: the partitions of the topics (a name, a list, or a regex
  with ``pattern=True``) and each one's log start offset and high watermark.
- ``resolve(bootstrap, partitions, spec, default)``: an ``OffsetSpec`` made concrete for
  each partition (ListOffsets by timestamp where the spec is a time).
- ``read_range(bootstrap, r)``: the records of ``[r.start, r.end)`` of one partition as
  ``pyarrow.RecordBatch``\\es in ``ARROW_SCHEMA``.

Each call opens its own connections (``asyncio.Runner`` around a ``Cluster``) and closes them
before returning, or, for ``read_range``, when its generator is exhausted or closed. Nothing
here holds a socket between calls, so the Spark classes that call these stay picklable.

The fetch loop asks the partition's leader for up to ``fetch_max_bytes`` from the next
offset, decodes whole batches and moves on from the last batch's next offset. It reads
uncommitted (isolation 0) and skips control batches; ``end`` is at most the high watermark
when the range was planned, and records below the high watermark never change (compaction
keeps offsets), so reading the same range twice yields the same records.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator, Iterable
from dataclasses import dataclass

import pyarrow as pa
from kio.schema.errors import ErrorCode

from ..client.cluster import Cluster
from ..records.batch import iter_batches
from .columns import ColumnBuilder
from .offsets import EARLIEST, LATEST, OffsetRange, OffsetSpec, OffsetSpecError

__all__ = ["PartitionOffsets", "RangeReadError", "UnknownTopicError", "describe", "read_range", "resolve"]

_RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
              ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch}
DEFAULT_FETCH_MAX_BYTES = 16 << 20
DEFAULT_BATCH_ROWS = 65_536


class RangeReadError(RuntimeError):
    """A range could not be read (data deleted by retention, a broker gone, corrupt bytes).

    The message is one line that names the range; Spark wraps it, and the export digs it out
    again by this class's name.
    """


class UnknownTopicError(LookupError):
    """No topic by that name (or none matching the pattern)."""


@dataclass(frozen=True, slots=True, order=True)
class PartitionOffsets:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int


# ---------------------------------------------------------------------------- metadata and offsets


def describe(bootstrap: str, topics: str | Iterable[str], *, pattern: bool = False) -> list[PartitionOffsets]:
    """Every partition of ``topics`` with its log start offset and high watermark."""
    return asyncio.run(_describe(bootstrap, topics, pattern))


async def _describe(bootstrap: str, topics: str | Iterable[str], pattern: bool) -> list[PartitionOffsets]:
    cluster = Cluster(bootstrap, client_id="pulllog-spark")
    try:
        names = await _topic_names(cluster, topics, pattern)
        tps = [(t, p) for t in names for p in await cluster.partitions_for(t)]
        earliest = await _list_offsets(cluster, {tp: EARLIEST for tp in tps})
        latest = await _list_offsets(cluster, {tp: LATEST for tp in tps})
        return [PartitionOffsets(t, p, earliest[(t, p)], latest[(t, p)]) for t, p in tps]
    finally:
        await cluster.close()


async def _topic_names(cluster: Cluster, topics: str | Iterable[str], pattern: bool) -> list[str]:
    if pattern:
        assert isinstance(topics, str)
        regex = re.compile(topics)
        await cluster.refresh(None)
        names = sorted(t for t, info in cluster.topics.items() if regex.fullmatch(t) and not info.internal)
        if not names:
            raise UnknownTopicError(f"no topic matches the pattern {topics!r}")
        return names
    names = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else list(topics)
    names = [t for t in names if t]
    if not names:
        raise UnknownTopicError("no topic given")
    await cluster.refresh(names)
    missing = [t for t in names if t not in cluster.topics]
    if missing:
        raise UnknownTopicError(f"topic {missing[0]!r} does not exist; create it with `pulllog topic create {missing[0]}`")
    return names


async def _list_offsets(cluster: Cluster, targets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """ListOffsets for each (topic, partition) -> timestamp (or EARLIEST / LATEST), by leader.

    A timestamp with no record at or after it answers -1; the caller decides what that means.
    """
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, p in targets:
        by_leader.setdefault((await cluster.partition_info(t, p)).leader, []).append((t, p))
    out: dict[tuple[str, int], int] = {}
    for leader, tps in by_leader.items():
        conn = await cluster.connection(leader)
        version = conn.version("list_offsets", 1, 7)
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p, "timestamp": targets[(t, p)],
                                             "current_leader_epoch": -1})
        resp = await conn.request("list_offsets", version, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]})
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise RangeReadError(f"ListOffsets for {t.name}-{p.partition_index} failed: "
                                         f"{ErrorCode(p.error_code).name.upper()}")
                out[(t.name, int(p.partition_index))] = int(p.offset)
    return out


def resolve(bootstrap: str, partitions: Iterable[PartitionOffsets], spec: OffsetSpec | None, default: int,
            *, what: str = "offset") -> dict[tuple[str, int], int]:
    """Concrete offsets for ``spec`` (None: ``default``, EARLIEST or LATEST) on each partition.

    An explicit offset outside [log start offset, high watermark] is an OffsetSpecError: a
    read that silently started elsewhere would not be the read the user asked for.
    """
    parts = list(partitions)
    out: dict[tuple[str, int], int] = {}
    by_time: dict[tuple[str, int], int] = {}
    for po in parts:
        tp = (po.topic, po.partition)
        if spec is None or spec.kind in ("earliest", "latest"):
            kind = default if spec is None else (EARLIEST if spec.kind == "earliest" else LATEST)
            out[tp] = po.log_start_offset if kind == EARLIEST else po.high_watermark
        elif spec.kind == "timestamp":
            assert spec.timestamp_ms is not None
            by_time[tp] = spec.timestamp_ms
        else:
            o = spec.offset_for(po.topic, po.partition, default)
            if o == EARLIEST:
                o = po.log_start_offset
            elif o == LATEST:
                o = po.high_watermark
            elif not po.log_start_offset <= o <= po.high_watermark:
                raise OffsetSpecError(
                    f"{what} {o} of {po.topic}-{po.partition} is outside the partition's offsets "
                    f"[{po.log_start_offset}, {po.high_watermark}]")
            out[tp] = o
    if by_time:
        found = asyncio.run(_offsets_for_times(bootstrap, by_time))
        hw = {(po.topic, po.partition): po.high_watermark for po in parts}
        for tp, o in found.items():
            out[tp] = hw[tp] if o < 0 else o
    return out


async def _offsets_for_times(bootstrap: str, targets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    cluster = Cluster(bootstrap, client_id="pulllog-spark")
    try:
        return await _list_offsets(cluster, targets)
    finally:
        await cluster.close()


# ---------------------------------------------------------------------------- reading a range


def read_range(bootstrap: str, r: OffsetRange, *, fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
               batch_rows: int = DEFAULT_BATCH_ROWS, max_wait_ms: int = 500,
               timeout_s: float = 120.0) -> Generator[pa.RecordBatch, None, None]:
    """The records of ``r`` as Arrow batches of at most about ``batch_rows`` rows (none if empty)."""
    if r.end <= r.start:
        return
    with asyncio.Runner() as runner:
        reader = _RangeReader(bootstrap, r, fetch_max_bytes, max_wait_ms, timeout_s)
        try:
            builder = ColumnBuilder(r.topic, r.partition)
            while not reader.done:
                chunk = runner.run(reader.fetch())
                reader.decode(chunk, builder)
                if len(builder) >= batch_rows or (reader.done and len(builder)):
                    yield builder.to_batch()
        finally:
            runner.run(reader.close())


class _RangeReader:
    def __init__(self, bootstrap: str, r: OffsetRange, fetch_max_bytes: int, max_wait_ms: int,
                 timeout_s: float) -> None:
        self.bootstrap, self.range = bootstrap, r
        self.fetch_max_bytes, self.max_wait_ms, self.timeout_s = fetch_max_bytes, max_wait_ms, timeout_s
        self.position = r.start
        self.cluster: Cluster | None = None

    @property
    def done(self) -> bool:
        return self.position >= self.range.end

    async def fetch(self) -> bytes:
        """The next non-empty records bytes from ``position``, retrying leader moves."""
        r = self.range
        if self.cluster is None:
            self.cluster = Cluster(self.bootstrap, client_id="pulllog-spark")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        last_problem = "no data"
        while loop.time() < deadline:
            try:
                conn = await self.cluster.leader_connection(r.topic, r.partition)
                version = conn.version("fetch", 4, 12)
                resp = await conn.request("fetch", version, {
                    "replica_id": -1, "max_wait": self.max_wait_ms, "min_bytes": 1,
                    "max_bytes": self.fetch_max_bytes, "isolation_level": 0, "session_id": 0,
                    "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": r.topic, "partitions": [{
                        "partition": r.partition, "fetch_offset": self.position, "current_leader_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": self.fetch_max_bytes}]}],
                })
            except ConnectionError as exc:
                last_problem = str(exc)
                self.cluster.invalidate()
                await asyncio.sleep(0.2)
                continue
            part = resp.responses[0].partitions[0]
            code = ErrorCode(part.error_code)
            if code == ErrorCode.offset_out_of_range:
                raise RangeReadError(
                    f"offset {self.position} of {r.topic}-{r.partition} is no longer on the broker "
                    f"(log start offset {int(part.log_start_offset)}): deleted before it was read")
            if code in _RETRIABLE:
                last_problem = code.name.upper()
                self.cluster.invalidate(r.topic)
                await asyncio.sleep(0.2)
                continue
            if code != ErrorCode.none:
                raise RangeReadError(f"fetch {r} at offset {self.position} failed: {code.name.upper()}")
            if part.records:
                return part.records
            if int(part.high_watermark) < r.end:
                last_problem = f"the high watermark is {int(part.high_watermark)}, below the range's end"
        raise RangeReadError(f"reading {r} stalled at offset {self.position} for {self.timeout_s:.0f} s "
                             f"({last_problem})")

    def decode(self, records: bytes, builder: ColumnBuilder) -> None:
        r = self.range
        moved = False
        for pos, header in iter_batches(records):
            builder.add_batch(records, pos, header, self.position, r.end)
            self.position = max(self.position, header.next_offset)
            moved = True
            if self.position >= r.end:
                break
        if not moved:
            raise RangeReadError(f"the broker returned no whole batch at offset {self.position} of {r}; "
                                 f"a batch larger than {self.fetch_max_bytes} bytes?")

    async def close(self) -> None:
        if self.cluster is not None:
            await self.cluster.close()
            self.cluster = None
