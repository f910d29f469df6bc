"""The ``pulllog`` PySpark data source (pyspark.sql.datasource), batch and streaming.

    spark.read.format("pulllog").option("bootstrap.servers", "127.0.0.1:9092")
         .option("topic", "orders").load()

Options (names as Spark's Kafka source spells them where there is one):

    bootstrap.servers        HOST:PORT[,...]; default 127.0.0.1:9092 (kafka.bootstrap.servers too)
    topic                    a topic or a comma-separated list (subscribe too)
    topicPattern             a regex a whole topic name must match (subscribePattern too)
    startingOffsets          see pulllog.spark.offsets; default earliest (batch), latest (stream)
    endingOffsets            batch only; default latest
    maxOffsetsPerPartition   split a partition's range into Spark input partitions of at most
                             this many offsets, for parallelism (default: one per partition)
    maxOffsetsPerTrigger     streaming: at most this many offsets per micro-batch, over all
                             partitions in proportion to their backlog (also honoured by
                             trigger(availableNow=True), which then takes several batches)
    fetchMaxBytes            bytes per Fetch request (default 16 MiB)
    isolationLevel           read_committed (default): only records of committed transactions
                             (and non-transactional ones), up to the last stable offsets;
                             read_uncommitted: every record, up to the high watermarks
                             (kafka.isolation.level too, Spark's Kafka source's spelling)

Columns: ``pulllog.spark.columns.SPARK_DDL``. Each input partition is an ``OffsetRange``
and is read over the wire by the executor that runs it (``pulllog.spark.wire``), so this
works against any pulllog broker, or any Kafka-compatible one, from anywhere in a cluster.
``read()`` yields Arrow record batches (about twice as fast as tuples here).

Streaming offsets are ``{"topic": {"partition": next offset}}``: Spark's checkpoint holds
exactly what each micro-batch consumed, so a restarted query, or the next
``trigger(availableNow=True)`` run, starts right after it. ``availableNow`` reads up to the
high watermarks seen when the query starts, no further. A partition that appears later
starts at its log start offset. ``commit()`` has nothing to release (the broker keeps no
state for this reader) and is not a signal of anything.

The classes hold only options and plain values (no sockets, no locks), so Spark can pickle
them to its Python workers; the package must be installed where the workers run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client.cluster import DEFAULT_BOOTSTRAP
from . import wire
from .columns import SPARK_DDL
from .offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OffsetSpecError,
    parse_offset_spec,
    split,
)

__all__ = ["PulllogDataSource", "RangePartition"]

_Offsets = dict[str, dict[str, int]]  # {"topic": {"partition": offset}}: what Spark checkpoints


class RangePartition(InputPartition):
    """One Spark input partition: one offset range of one Kafka partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r

    def __repr__(self) -> str:
        return f"RangePartition({self.range})"


class _Options:
    """The data source's options, parsed once and checked with messages that name the option."""

    def __init__(self, options: Mapping[str, str], *, streaming: bool) -> None:
        def opt(*names: str) -> str | None:
            for n in names:
                if options.get(n) not in (None, ""):
                    return options[n]
            return None

        self.bootstrap = opt("bootstrap.servers", "kafka.bootstrap.servers") or DEFAULT_BOOTSTRAP
        topic, pattern = opt("topic", "subscribe"), opt("topicPattern", "subscribePattern")
        if (topic is None) == (pattern is None):
            raise ValueError('the pulllog source needs exactly one of the options "topic" and "topicPattern"')
        self.topics: str = topic if topic is not None else pattern  # type: ignore[assignment]
        self.pattern = pattern is not None
        self.starting = parse_offset_spec(opt("startingOffsets"), what="startingOffsets")
        self.ending = parse_offset_spec(opt("endingOffsets"), what="endingOffsets")
        if streaming and self.ending is not None:
            raise ValueError("endingOffsets is for batch reads; a stream reads on as records arrive")
        self.max_per_partition = _positive(opt("maxOffsetsPerPartition"), "maxOffsetsPerPartition")
        self.max_per_trigger = _positive(opt("maxOffsetsPerTrigger"), "maxOffsetsPerTrigger")
        self.fetch_max_bytes = _positive(opt("fetchMaxBytes"), "fetchMaxBytes") or wire.DEFAULT_FETCH_MAX_BYTES
        isolation = opt("isolationLevel", "kafka.isolation.level", "isolation.level") or "read_committed"
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"option isolationLevel must be read_committed or read_uncommitted, not {isolation!r}")
        self.read_committed = isolation == "read_committed"

    def describe(self) -> list[wire.PartitionOffsets]:
        return wire.describe(self.bootstrap, self.topics, pattern=self.pattern, read_committed=self.read_committed)


def _positive(text: str | None, name: str) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"option {name} must be a positive integer, not {text!r}")
    return value


def _read(options: _Options, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, RangePartition)
    yield from wire.read_range(options.bootstrap, partition.range, fetch_max_bytes=options.fetch_max_bytes,
                               read_committed=options.read_committed)


class PulllogDataSource(DataSource):
    """``format("pulllog")``: records of pulllog (or any Kafka-compatible) topics."""

    @classmethod
    def name(cls) -> str:
        return "pulllog"

    def schema(self) -> str:
        return SPARK_DDL

    def reader(self, schema: StructType) -> PulllogBatchReader:
        return PulllogBatchReader(_Options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> PulllogStreamReader:
        return PulllogStreamReader(_Options(self.options, streaming=True))


class PulllogBatchReader(DataSourceReader):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        parts = o.describe()
        starts = wire.resolve(o.bootstrap, parts, o.starting, EARLIEST, what="startingOffsets")
        ends = wire.resolve(o.bootstrap, parts, o.ending, LATEST, what="endingOffsets")
        ranges = []
        for p in parts:
            tp = (p.topic, p.partition)
            if ends[tp] < starts[tp]:
                raise OffsetSpecError(f"endingOffsets {ends[tp]} of {p.topic}-{p.partition} is before "
                                      f"its startingOffsets {starts[tp]}")
            ranges.append(OffsetRange(p.topic, p.partition, starts[tp], ends[tp]))
        planned = split(ranges, o.max_per_partition)
        # Spark needs at least one partition; an empty range reads nothing.
        return [RangePartition(r) for r in planned] or [RangePartition(OffsetRange(parts[0].topic, 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class PulllogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: _Options) -> None:
        self.options = options
        self.target: dict[tuple[str, int], int] | None = None  # set by availableNow: read no further

    def initialOffset(self) -> _Offsets:
        o = self.options
        parts = o.describe()
        starts = wire.resolve(o.bootstrap, parts, o.starting, LATEST, what="startingOffsets")
        return _to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: what is there now is the target; later records wait
        for the next run. Spark then passes our read limit, so the target may take several
        micro-batches."""
        self.target = {(p.topic, p.partition): p.high_watermark for p in self.options.describe()}

    def latestOffset(self, start: _Offsets, limit: ReadLimit) -> _Offsets:
        parts = self.options.describe()
        begin = _from_json(start)
        latest = {(p.topic, p.partition): p.high_watermark for p in parts}
        if self.target is not None:
            latest = {tp: min(o, self.target[tp]) for tp, o in latest.items() if tp in self.target}
        first = {(p.topic, p.partition): p.log_start_offset for p in parts}
        for tp in latest:
            begin.setdefault(tp, first[tp])  # a partition added since: from its beginning
            latest[tp] = max(latest[tp], begin[tp])
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, limit.max_rows)
        return _to_json(latest)

    def reportLatestOffset(self) -> _Offsets:
        return _to_json({(p.topic, p.partition): p.high_watermark for p in self.options.describe()})

    def partitions(self, start: _Offsets, end: _Offsets) -> Sequence[InputPartition]:
        begin, stop = _from_json(start), _from_json(end)
        missing = [tp for tp in stop if tp not in begin]
        if missing:
            first = {(p.topic, p.partition): p.log_start_offset for p in self.options.describe()}
            for tp in missing:
                begin[tp] = first.get(tp, 0)
        ranges = [OffsetRange(t, p, begin[(t, p)], e) for (t, p), e in sorted(stop.items())]
        return [RangePartition(r) for r in split(ranges, self.options.max_per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: _Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the broker."""


def _to_json(offsets: Mapping[tuple[str, int], int]) -> _Offsets:
    out: _Offsets = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def _from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, m in offsets.items() for p, o in m.items()}


def _rate_limit(begin: Mapping[tuple[str, int], int], latest: Mapping[tuple[str, int], int],
                max_rows: int) -> dict[tuple[str, int], int]:
    """Advance each partition by its share of ``max_rows``, in proportion to its backlog."""
    backlog = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    budget = max_rows
    for tp in sorted(latest):
        share = min(backlog[tp], max_rows * backlog[tp] // total)
        out[tp] = begin[tp] + share
        budget -= share
    for tp in sorted(latest):  # hand out what rounding left, so every trigger makes progress
        extra = min(budget, latest[tp] - out[tp])
        out[tp] += extra
        budget -= extra
    return out

