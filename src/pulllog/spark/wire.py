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
offset, decodes whole batches and moves on from the last batch's next offset. It always
skips control batches (transaction markers). Isolation, chosen per call:

- ``read_committed=True`` (what the data source and the export use by default): the end
  offsets are the last stable offsets (ListOffsets with isolation 1), the Fetch asks for
  isolation 1 and drops the batches of aborted transactions with the aborted-transaction
  list it returns, by the rule Kafka's consumer keeps (``pulllog.client.completed_fetch``):
  a transactional batch is dropped while its producer has an aborted transaction that
  started at or before the batch's last offset and whose ABORT marker has not been passed.
- ``read_committed=False``: the high watermarks and every record, including those of open
  and aborted transactions.

``end`` is at most the end offset (high watermark or last stable offset) when the range
was planned; records below it never change (compaction keeps offsets, and a transaction
below the last stable offset is decided), so reading the same range twice yields the same
records.
"""

from __future__ import annotations

import asyncio
import heapq
import re
import struct
from collections.abc import Generator, Iterable
from dataclasses import dataclass

import pyarrow as pa
from kio.schema.errors import ErrorCode

from ..client.cluster import Cluster
from ..client.types import ConsumerRecord
from ..records.batch import BATCH_HEADER_SIZE, BatchHeader, iter_batches
from ..records.control import ControlType
from ..records.decoding import decode_records
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
    """A partition's offsets; ``high_watermark`` is where a reader stops: the high watermark,
    or with ``read_committed`` the last stable offset."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int


# ---------------------------------------------------------------------------- metadata and offsets


def describe(bootstrap: str, topics: str | Iterable[str], *, pattern: bool = False,
             read_committed: bool = False) -> list[PartitionOffsets]:
    """Every partition of ``topics`` with its log start offset and high watermark (with
    ``read_committed``, its last stable offset in that field)."""
    return asyncio.run(_describe(bootstrap, topics, pattern, read_committed))


async def _describe(bootstrap: str, topics: str | Iterable[str], pattern: bool,
                    read_committed: bool) -> list[PartitionOffsets]:
    cluster = Cluster(bootstrap, client_id="pulllog-spark")
    try:
        names = await _topic_names(cluster, topics, pattern)
        tps = [(t, p) for t in names for p in await cluster.partitions_for(t)]
        earliest = await _list_offsets(cluster, {tp: EARLIEST for tp in tps})
        latest = await _list_offsets(cluster, {tp: LATEST for tp in tps}, read_committed)
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


async def _list_offsets(cluster: Cluster, targets: dict[tuple[str, int], int],
                        read_committed: bool = False) -> dict[tuple[str, int], int]:
    """ListOffsets for each (topic, partition) -> timestamp (or EARLIEST / LATEST), by leader;
    with ``read_committed`` LATEST is the last stable offset.

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
            "replica_id": -1, "isolation_level": int(read_committed),
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
            out[tp] = hw[tp] if o < 0 else min(o, hw[tp])  # never past the end (the LSO, read committed)
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
               timeout_s: float = 120.0, read_committed: bool = False) -> Generator[pa.RecordBatch, None, None]:
    """The records of ``r`` as Arrow batches of at most about ``batch_rows`` rows (none if
    empty); with ``read_committed`` without those of aborted transactions."""
    if r.end <= r.start:
        return
    with asyncio.Runner() as runner:
        reader = _RangeReader(bootstrap, r, fetch_max_bytes, max_wait_ms, timeout_s, read_committed)
        try:
            builder = ColumnBuilder(r.topic, r.partition)
            while not reader.done:
                chunk, aborted = runner.run(reader.fetch())
                reader.decode(chunk, builder, aborted)
                if len(builder) >= batch_rows or (reader.done and len(builder)):
                    yield builder.to_batch()
        finally:
            runner.run(reader.close())


class _RangeReader:
    def __init__(self, bootstrap: str, r: OffsetRange, fetch_max_bytes: int, max_wait_ms: int,
                 timeout_s: float, read_committed: bool = False) -> None:
        self.bootstrap, self.range = bootstrap, r
        self.fetch_max_bytes, self.max_wait_ms, self.timeout_s = fetch_max_bytes, max_wait_ms, timeout_s
        self.read_committed = read_committed
        self.position = r.start
        self.cluster: Cluster | None = None
        self._aborted = _AbortedTransactions()

    @property
    def done(self) -> bool:
        return self.position >= self.range.end

    async def fetch(self) -> tuple[bytes, list[tuple[int, int]]]:
        """The next non-empty records bytes from ``position`` and the aborted transactions
        (producer id, first offset) among them, retrying leader moves."""
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
                    "max_bytes": self.fetch_max_bytes, "isolation_level": int(self.read_committed), "session_id": 0,
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
                return part.records, [(int(a.producer_id), int(a.first_offset))
                                      for a in part.aborted_transactions or ()]
            if int(part.high_watermark) < r.end:
                last_problem = f"the high watermark is {int(part.high_watermark)}, below the range's end"
        raise RangeReadError(f"reading {r} stalled at offset {self.position} for {self.timeout_s:.0f} s "
                             f"({last_problem})")

    def decode(self, records: bytes, builder: ColumnBuilder, aborted: list[tuple[int, int]] | None = None) -> None:
        r = self.range
        moved = False
        skip = self._aborted
        if self.read_committed:
            skip.add(aborted or ())
        for pos, header in iter_batches(records):
            if not (self.read_committed and skip.drops(records, pos, header)):
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


_CONTROL_KEY = struct.Struct(">hh")  # a control record's key: version, type


class _AbortedTransactions:
    """Which batches of a read_committed fetch belong to aborted transactions (the module
    docstring has the rule; it is Kafka's consumer's)."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int]] = []  # (first offset, producer id), a heap
        self._seen: set[tuple[int, int]] = set()
        self._aborting: set[int] = set()  # producers inside an aborted transaction

    def add(self, aborted: Iterable[tuple[int, int]]) -> None:
        for producer_id, first_offset in aborted:
            if (first_offset, producer_id) not in self._seen:  # the next fetch may list it again
                self._seen.add((first_offset, producer_id))
                heapq.heappush(self._pending, (first_offset, producer_id))

    def drops(self, records: bytes, pos: int, header: BatchHeader) -> bool:
        """Whether the batch at ``pos`` is to be dropped (control batches are dropped anyway)."""
        if header.producer_id < 0:
            return False
        last_offset = header.next_offset - 1
        while self._pending and self._pending[0][0] <= last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            if _is_abort_marker(records, pos, header):
                self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting


def _is_abort_marker(records: bytes, pos: int, header: BatchHeader) -> bool:
    """A control batch holds one record, uncompressed, whose key is (version, type)."""
    body = memoryview(records)[pos + BATCH_HEADER_SIZE:pos + header.size]
    decoded = decode_records(ConsumerRecord, bytes(body), 0, len(body), header.records_count, header.base_offset,
                             header.base_timestamp, 0, 0, "", 0)
    key = decoded[0].key if decoded else None
    return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == ControlType.ABORT
