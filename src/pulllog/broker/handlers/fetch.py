"""Fetch (1): segment bytes straight to the socket, with long polling in the purgatory.

The broker never decodes records here: each partition's data is a ``FileSlice`` of a
segment file, which the connection sends with sendfile. ``fetch.max.bytes`` and the
per-partition max bytes are honoured, except that the first partition with data returns
at least one whole batch (so a consumer can always make progress).

If fewer than ``min_bytes`` are available, the request waits in the fetch purgatory until
enough is appended to a partition it reads (``check_and_complete`` on append) or until
``max_wait_ms`` passes, then reads again. Fetch sessions (KIP-227) are answered
sessionless (session id 0), which every client accepts: it then sends full requests.

Replication (a cluster member, broker/replica_manager.py): a consumer (replica_id -1) reads
a partition led here up to the high watermark; a follower (replica_id = its broker id)
reads up to the log end, and its fetch offset is its log end offset as the leader tracks it
(the high watermark and the ISR follow). A partition not led here, or a
current_leader_epoch other than the leader's, answers NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.

Isolation (KIP-98): read_uncommitted (0) reads up to the high watermark and answers a null
aborted-transactions list; read_committed (1) reads up to the last stable offset (the
first offset of the oldest open transaction) and lists the aborted transactions (producer
id, first offset) that meet the returned range, which the consumer drops together with the
control batches. A read_committed fetch waiting at the LSO wakes when a marker moves it
(the marker writer calls ``on_append`` as Produce does), not when more of a still-open
transaction is appended.

A ``FileSlice`` holds its segment's open file until the response is sent, outside the
bounded cache of open segment files (``log.max.open.files``). So that a fetch of
thousands of partitions cannot run the broker out of descriptors, a piece under
``_COPY_BELOW`` bytes, and every piece after the first ``_MAX_SLICES`` of a response, is
copied into the response instead (a copy of a small piece costs less than a sendfile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import Log, OffsetOutOfRangeError
from ...net.apis import ApiKey
from ...net.fetch import (
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponseData,
    FetchTopicResponse,
    FileSlice,
    encode_fetch_response,
)
from ...purgatory.delayed import DelayedOperation
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

READ_COMMITTED = 1
_COPY_BELOW = 16 * 1024
_MAX_SLICES = 32


@dataclass(slots=True)
class _Watch:
    log: Log
    fetch_offset: int
    segment: object
    start_size: int
    read_committed: bool = False
    follower: bool = False  # a follower reads to the log end; a consumer to the high watermark


class DelayedFetch(DelayedOperation):
    """Completes once ``min_bytes`` could be returned: the bytes the first read already
    found plus what was appended since (estimated from segment growth), as Kafka counts
    from the fetch offset, not from the moment the fetch started waiting."""

    def __init__(self, delay_ms: int, min_bytes: int, watches: list[_Watch], already_available: int = 0) -> None:
        super().__init__(delay_ms)
        self.min_bytes = min_bytes
        self.watches = watches
        self.already_available = already_available

    def try_complete(self) -> bool:
        available = self.already_available
        for w in self.watches:
            log = w.log
            end = log.log_end_offset if w.follower else log.high_watermark
            if w.read_committed:
                stable = log.last_stable_offset
                if stable <= w.fetch_offset:
                    continue  # nothing committed past the fetch offset yet
                if stable < end:
                    # A transaction is open past the fetched offset: the segment's growth says
                    # nothing about what is readable. Something is: answer with it.
                    return self.force_complete()
            elif end <= w.fetch_offset:
                continue
            active = log.active_segment
            available += (active.size - w.start_size) if active is w.segment else self.min_bytes
            if available >= self.min_bytes:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        """Nothing to do: the handler reads the partitions again once woken."""


def _partition_max_bytes(p: Any) -> int:
    return int(getattr(p, "partition_max_bytes", 1 << 20))


def _lookup(broker: "BrokerApi", name: str, p: Any, replica_id: int) -> "Log | PartitionError":
    """A cluster member's partition: led here (in the request's epoch, if it names one); a
    follower's fetch also reports its position to the leader (replica_manager.py)."""
    replicas = broker.replicas
    if replicas is None:
        return broker.partition(name, p.partition)
    epoch = int(getattr(p, "current_leader_epoch", -1))
    if replica_id >= 0:
        return replicas.follower_fetch(name, p.partition, replica_id, p.fetch_offset, epoch)
    return replicas.leader_log(name, p.partition, epoch)


def read_partitions(broker: "BrokerApi", topics: Any, max_bytes: int, isolation: int,
                    replica_id: int = -1) -> tuple[list[FetchTopicResponse], int]:
    remaining = max_bytes
    replicated = broker.replicas is not None
    total = 0
    slices = 0
    out: list[FetchTopicResponse] = []
    for t in topics:
        name = t.topic
        parts: list[FetchPartitionResponse] = []
        for p in t.partitions:
            index = p.partition
            log = _lookup(broker, name, p, replica_id) if replicated else broker.partition(name, index)
            if isinstance(log, PartitionError):
                # As Kafka: no offsets (-1) and an empty, not null, aborted_transactions.
                parts.append(FetchPartitionResponse(index, log.code.value, aborted_transactions=[], records=b""))
                continue
            hw = log.high_watermark
            lso = log.last_stable_offset
            aborted: list[AbortedTransaction] | None = [] if isolation == READ_COMMITTED else None
            try:
                piece = None
                if remaining > 0:
                    size = min(_partition_max_bytes(p), remaining)
                    if isolation == READ_COMMITTED:
                        piece, txns = log.read_committed(p.fetch_offset, size, min_one_batch=total == 0)
                        aborted = [AbortedTransaction(pid, first) for pid, first in txns]
                    else:
                        piece = log.read(p.fetch_offset, size, max_offset=hw if replica_id < 0 else None,
                                         min_one_batch=total == 0)
                elif p.fetch_offset < log.log_start_offset or p.fetch_offset > log.log_end_offset:
                    raise OffsetOutOfRangeError(p.fetch_offset, log.log_start_offset, log.log_end_offset)
            except OffsetOutOfRangeError:
                # Kafka answers -1 for the offsets here. pulllog gives the real ones, so that its
                # consumer names the valid range without another request (README: differences).
                parts.append(FetchPartitionResponse(index, ErrorCode.offset_out_of_range.value, hw, lso,
                                                    log.log_start_offset, aborted, records=b""))
                continue
            records: bytes | FileSlice = b""
            if piece is not None:
                if piece.length < _COPY_BELOW or slices >= _MAX_SLICES:
                    records = piece.read()
                else:
                    records = FileSlice(piece.file, piece.position, piece.length)
                    slices += 1
                total += piece.length
                remaining -= piece.length
            parts.append(FetchPartitionResponse(index, 0, hw, lso, log.log_start_offset, aborted, records=records))
        out.append(FetchTopicResponse(name=name, partitions=parts))
    return out, total


def _watches(broker: "BrokerApi", topics: Any, isolation: int, replica_id: int) -> list[_Watch]:
    watches = []
    replicas = broker.replicas
    for t in topics:
        for p in t.partitions:
            log = broker.partition(t.topic, p.partition) if replicas is None else \
                replicas.leader_log(t.topic, p.partition)
            if not isinstance(log, PartitionError):
                active = log.active_segment
                watches.append(_Watch(log, p.fetch_offset, active, active.size, isolation == READ_COMMITTED,
                                      replica_id >= 0))
    return watches


@handler(ApiKey.FETCH, 4, 12, encode=encode_fetch_response)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> FetchResponseData:
    body = ctx.body
    max_bytes = int(getattr(body, "max_bytes", 2**31 - 1))
    isolation = int(getattr(body, "isolation_level", 0))
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    min_bytes = int(body.min_bytes)
    replica_id = int(getattr(body, "replica_id", -1))
    topics, total = read_partitions(broker, body.topics, max_bytes, isolation, replica_id)
    has_error = any(p.error_code for t in topics for p in t.partitions)
    if total < min_bytes and max_wait_ms > 0 and not has_error and body.topics:
        op = DelayedFetch(max_wait_ms, min_bytes, _watches(broker, body.topics, isolation, replica_id),
                          already_available=total)
        keys = [(t.topic, p.partition) for t in body.topics for p in t.partitions]
        await broker.wait_for_fetch(op, keys)
        topics, total = read_partitions(broker, body.topics, max_bytes, isolation, replica_id)
    return FetchResponseData(throttle_time_ms=0, error_code=0, session_id=0, topics=topics)
