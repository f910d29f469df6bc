"""``pulllog export --parquet``: a topic to Parquet, incrementally and exactly once.

The paper's pattern (section 4: a job that stores data and offsets together only when the
whole job succeeds), for Spark:

1. The driver opens the output directory (``progress.ExportDir``: lock, ownership check,
   recovery of an interrupted run) and plans offset ranges: per partition from the committed
   offset (or ``--from``) to ``--to`` (default: the high watermark now), cut into pieces of
   at most ``max_offsets_per_file`` offsets on fixed boundaries (``offsets.split``).
2. Each range is one task: ``write_range`` reads it over the wire and writes its Parquet
   file(s) into the run's staging directory, named by the range. Spark runs the tasks
   (``engine="spark"``: one RDD partition per range, so Spark's retries and a cluster's
   executors just work); ``engine="arrow"`` runs the very same function in this process.
3. Only when every task has succeeded does the driver publish the files and commit the new
   offsets (``ExportDir.publish``). A run that fails or is killed before that has changed
   nothing a reader sees; one killed while publishing is finished by the next run.

Tasks write with pyarrow to local paths, so on a cluster (``--master``) the output directory
must be a filesystem every executor mounts at the same path (NFS and the like; not HDFS or an
object store: publishing relies on an atomic rename and on flock).

With ``value_format="json"`` each file also has a ``value_json`` struct column, the values
parsed with one schema per export (``pulllog.spark.json_values``: given or inferred from a
sample, fixed by the first run, a value that does not fit fails the run).

Transactions: by default (``read_committed=True``) the export reads committed data only:
the ends are the last stable offsets, and the records of aborted transactions (and every
commit/abort marker) never reach Parquet; records of a transaction still open are exported
by a later run, once it commits. ``read_committed=False`` (``--isolation-level
read_uncommitted``) exports every record up to the high watermark.

Both engines write with the same pyarrow code from the same plan, so their output is
identical, file names and bytes. Parquet details: snappy, row groups of ``ROW_GROUP_ROWS``
rows, timestamps in microseconds UTC (Spark rejects nanoseconds), statistics on (so a reader
can skip row groups by offset or time).
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import json_values, wire
from .columns import ARROW_SCHEMA
from .offsets import EARLIEST, LATEST, OffsetRange, OffsetSpec, split
from .progress import STAGED_SUFFIX, ExportDir, data_file_name

__all__ = [
    "DEFAULT_MAX_OFFSETS_PER_FILE",
    "ExportError",
    "ExportPlan",
    "ExportResult",
    "RangeResult",
    "RangeTask",
    "export",
    "write_range",
]

DEFAULT_MAX_OFFSETS_PER_FILE = 500_000
ROW_GROUP_ROWS = 131_072
COMPRESSION = "snappy"
ENGINES = ("spark", "arrow")
VALUE_FORMATS = ("raw", "json")


class ExportError(Exception):
    """The export cannot run or did not finish; one line that says what to do."""


# ---------------------------------------------------------------------------- one range


@dataclass(frozen=True, slots=True)
class RangeTask:
    """Everything a task needs, picklable: where to read, what, and where to write."""

    bootstrap: str
    range: OffsetRange
    root: str
    run_id: str
    partition_by: str
    fetch_max_bytes: int = wire.DEFAULT_FETCH_MAX_BYTES
    value_schema: str | None = None  # --value-format json: the json_values.ValueSchema, as text
    read_committed: bool = True  # without the records of aborted transactions


@dataclass(frozen=True, slots=True)
class RangeResult:
    range: OffsetRange
    files: tuple[str, ...]  # paths relative to OUT, as they will be published
    records: int
    value_bytes: int  # key + value bytes
    file_bytes: int


def _file_schema(partition_by: str, values: json_values.ValueSchema | None) -> pa.Schema:
    fields = [f for f in ARROW_SCHEMA if partition_by != "topic" or f.name not in ("topic", "partition")]
    if values is not None:
        fields.append(pa.field(json_values.COLUMN, values.arrow_type))
    return pa.schema(fields)


def _with_json(batch: pa.RecordBatch, partition: int, values: json_values.ValueSchema) -> pa.RecordBatch:
    parsed = json_values.parse_values(batch.column("value"), partition, batch.column("offset"), values)
    return pa.RecordBatch.from_arrays([*batch.columns, parsed], names=[*batch.schema.names, json_values.COLUMN])


class _FileWriter:
    """One Parquet file, written in row groups of exactly ROW_GROUP_ROWS rows (the last one
    shorter), whatever the batch sizes, so the bytes depend only on the records."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        self.columns = schema.names
        self.schema = schema
        path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = pq.ParquetWriter(self.tmp, self.schema, compression=COMPRESSION)
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch.select(self.columns))
        self.pending_rows += batch.num_rows
        self.rows += batch.num_rows
        while self.pending_rows >= ROW_GROUP_ROWS:
            table = pa.Table.from_batches(self.pending, self.schema)
            self.writer.write_table(table.slice(0, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
            rest = table.slice(ROW_GROUP_ROWS)
            self.pending = rest.combine_chunks().to_batches() if rest.num_rows else []
            self.pending_rows = rest.num_rows

    def close(self) -> int:
        if self.pending_rows:
            self.writer.write_table(pa.Table.from_batches(self.pending, self.schema), row_group_size=ROW_GROUP_ROWS)
        self.writer.close()
        fd = os.open(self.tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the commit may follow at once; the bytes must be on disk first
        finally:
            os.close(fd)
        os.replace(self.tmp, self.path)  # a retried task replaces its own file, never half of one
        return self.path.stat().st_size

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def write_range(task: RangeTask) -> RangeResult:
    """Read ``task.range`` and write it to staging: one file, or one per UTC day with ``date``.

    This runs in Spark's Python workers (and in-process for the arrow engine); it must stay a
    module-level function of an installed module so Spark pickles it by reference.
    """
    r = task.range
    staging = Path(task.root) / "_pulllog" / "staging" / task.run_id
    name = data_file_name(r.partition, r.start, r.end)
    values = json_values.ValueSchema.parse(task.value_schema) if task.value_schema is not None else None
    schema = _file_schema(task.partition_by, values)
    writers: dict[str, _FileWriter] = {}

    def writer_for(rel: str) -> _FileWriter:
        w = writers.get(rel)
        if w is None:
            w = writers[rel] = _FileWriter(staging / (rel + STAGED_SUFFIX), schema)
        return w

    records = value_bytes = 0
    try:
        for batch in wire.read_range(task.bootstrap, r, fetch_max_bytes=task.fetch_max_bytes,
                                     read_committed=task.read_committed):
            records += batch.num_rows
            value_bytes += _value_bytes(batch)
            if values is not None:
                batch = _with_json(batch, r.partition, values)
            if task.partition_by == "topic":
                writer_for(f"topic={r.topic}/partition={r.partition}/{name}").add(batch)
                continue
            days = pc.strftime(batch.column("timestamp"), format="%Y-%m-%d")
            for day in sorted(pc.unique(days).to_pylist()):
                writer_for(f"date={day}/{name}").add(batch.filter(pc.equal(days, day)))
        file_bytes = sum(w.close() for w in writers.values())
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return RangeResult(r, tuple(sorted(writers)), records, value_bytes, file_bytes)


def _value_bytes(batch: pa.RecordBatch) -> int:
    total = 0
    for name in ("key", "value"):
        lengths = pc.binary_length(batch.column(name))
        total += pc.sum(lengths).as_py() or 0
    return total


# ---------------------------------------------------------------------------- the plan


@dataclass(slots=True)
class ExportPlan:
    topic: str
    starts: dict[int, int]
    ends: dict[int, int]
    ranges: list[OffsetRange]
    resumed: bool  # started from committed progress
    notes: list[str] = field(default_factory=list)

    @property
    def offsets(self) -> int:
        return sum(r.size for r in self.ranges)


def describe(bootstrap: str, topic: str, read_committed: bool = True) -> list[wire.PartitionOffsets]:
    try:
        return wire.describe(bootstrap, topic, read_committed=read_committed)
    except wire.UnknownTopicError as exc:
        raise ExportError(str(exc)) from None


def plan(out: ExportDir, parts: list[wire.PartitionOffsets], bootstrap: str, topic: str,
         start: OffsetSpec | None, end: OffsetSpec | None, max_offsets_per_file: int) -> ExportPlan:
    """Ranges from the committed offsets (or ``start`` for partitions without progress) to ``end``."""
    committed = out.committed
    fresh = [p for p in parts if p.partition not in committed]
    from_spec = wire.resolve(bootstrap, fresh, start, EARLIEST, what="--from") if fresh else {}
    ends = wire.resolve(bootstrap, parts, end, LATEST, what="--to")
    notes = []
    starts: dict[int, int] = {}
    for p in parts:
        if p.partition in committed:
            c = committed[p.partition]
            if c > p.high_watermark:
                raise ExportError(
                    f"partition {p.partition} of {topic!r} was exported up to offset {c} but now ends at "
                    f"{p.high_watermark}: was the topic deleted and created again? use --full to start over")
            if c < p.log_start_offset:
                notes.append(f"partition {p.partition}: offsets {c} to {p.log_start_offset - 1} were deleted "
                             "(retention) before they were exported; continuing from the log start offset")
                c = p.log_start_offset
            starts[p.partition] = c
        else:
            starts[p.partition] = from_spec[(topic, p.partition)]
            to = ends[(topic, p.partition)]
            if to < starts[p.partition]:  # a reversed range is a mistake, not "nothing to do"
                raise ExportError(
                    f"--from is after --to for partition {p.partition} of {topic!r} (offset "
                    f"{starts[p.partition]} > {to}): give a --to at or after --from")
    end_of = {p.partition: max(starts[p.partition], ends[(topic, p.partition)]) for p in parts}
    ranges = split((OffsetRange(topic, p, starts[p], end_of[p]) for p in sorted(starts)), max_offsets_per_file)
    return ExportPlan(topic, starts, end_of, ranges, resumed=bool(committed), notes=notes)


# ---------------------------------------------------------------------------- running it


@dataclass(slots=True)
class ExportResult:
    out: Path
    topic: str
    engine: str
    plan: ExportPlan
    results: list[RangeResult]
    seconds: float
    recovered: list[str]
    value_schema: str | None = None  # the json_values schema the files have, if any

    @property
    def records(self) -> int:
        return sum(r.records for r in self.results)

    @property
    def value_bytes(self) -> int:
        return sum(r.value_bytes for r in self.results)

    @property
    def file_bytes(self) -> int:
        return sum(r.file_bytes for r in self.results)

    @property
    def files(self) -> int:
        return sum(len(r.files) for r in self.results)


ProgressCallback = Callable[[int, int, int], None]  # (ranges done, ranges in all, records so far)


def export(bootstrap: str, topic: str, out: str | Path, *, start: OffsetSpec | None = None,
           end: OffsetSpec | None = None, full: bool = False, partition_by: str = "topic",
           engine: str = "spark", spark: Any = None, max_offsets_per_file: int = DEFAULT_MAX_OFFSETS_PER_FILE,
           on_plan: Callable[[ExportPlan], None] | None = None,
           on_progress: ProgressCallback | None = None, value_format: str = "raw",
           value_schema: str | None = None, read_committed: bool = True) -> ExportResult:
    """Export the new records of ``topic`` to ``out``; see the module docstring.

    ``spark`` is a SparkSession for the spark engine (``pulllog.spark.session.start`` makes
    one); ``on_plan`` sees the plan before any task runs (and may start Spark then).
    ``value_format="json"`` adds the parsed values (``pulllog.spark.json_values``), with
    ``value_schema`` or one inferred from the first records. ``read_committed=False`` also
    exports the records of open and aborted transactions.
    """
    if engine not in ENGINES:
        raise ExportError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if value_format not in VALUE_FORMATS:
        raise ExportError(f"--value-format {value_format!r}: expected one of {', '.join(VALUE_FORMATS)}")
    if value_schema is not None and value_format != "json":
        raise ExportError("--value-schema needs --value-format json")
    try:
        given = json_values.ValueSchema.parse(value_schema) if value_schema is not None else None
    except json_values.ValueSchemaError as exc:
        raise ExportError(str(exc)) from None
    began = time.monotonic()
    root = Path(out).resolve()
    parts = describe(bootstrap, topic, read_committed)  # an unknown topic fails before the directory is touched
    with ExportDir.open(root, topic, partition_by, full=full) as outdir:
        the_plan = plan(outdir, parts, bootstrap, topic, start, end, max_offsets_per_file)
        values = _value_schema(outdir, value_format, given, bootstrap, the_plan, read_committed)
        if on_plan is not None:
            on_plan(the_plan)
        run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
        tasks = [RangeTask(bootstrap, r, str(root), run_id, partition_by,
                           value_schema=None if values is None else str(values), read_committed=read_committed)
                 for r in the_plan.ranges]
        if not tasks:
            results: list[RangeResult] = []
        elif engine == "arrow":
            results = _run_in_process(tasks, on_progress)
        else:
            if spark is None:
                raise ExportError("the spark engine needs a SparkSession (pulllog.spark.session.start())")
            results = _run_on_spark(spark, tasks, on_progress)
        files = [f for r in results for f in r.files]
        seconds = time.monotonic() - began
        committed = {**outdir.committed, **the_plan.ends}
        summary = {
            "run": run_id, "engine": engine, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "records": sum(r.records for r in results), "files": len(files), "seconds": round(seconds, 3),
            "offsets": {str(p): [the_plan.starts[p], the_plan.ends[p]] for p in sorted(the_plan.starts)},
        }
        if tasks or committed != outdir.committed:
            if values is not None:
                outdir.value_schema = str(values)  # committed with the first files that have it
            outdir.publish(run_id, files, committed, summary)
        return ExportResult(root, topic, engine, the_plan, results, time.monotonic() - began, outdir.recovered,
                            None if values is None else str(values))


def _value_schema(outdir: ExportDir, value_format: str, given: json_values.ValueSchema | None, bootstrap: str,
                  the_plan: ExportPlan, read_committed: bool = True) -> json_values.ValueSchema | None:
    """The schema this run writes values with: the export's own once it has one (json_values'
    first rule), else the one given, else one inferred from the first records to export."""
    stored = outdir.value_schema
    if value_format == "raw":
        if stored is not None:
            raise ExportError(f"{outdir.root} holds values parsed as JSON ({stored}); add --value-format json, "
                              "or --full to start over with raw values")
        return None
    if stored is not None:
        kept = json_values.ValueSchema.parse(stored)
        if given is not None and given != kept:
            raise ExportError(f"{outdir.root} holds values with the schema '{kept}', not '{given}'; "
                              "give that schema (or none), or --full to start over")
        return kept
    if given is not None or not the_plan.ranges:
        return given
    values, where = _sample(bootstrap, the_plan.ranges, json_values.SAMPLE_RECORDS, read_committed)
    try:
        return json_values.infer(values, where)
    except json_values.ValueSchemaError as exc:
        raise ExportError(str(exc)) from None


def _sample(bootstrap: str, ranges: Sequence[OffsetRange], limit: int, read_committed: bool = True
            ) -> tuple[list[bytes | None], list[tuple[int, int]]]:
    """Up to ``limit`` values from the start of the ranges, with their (partition, offset)."""
    values: list[bytes | None] = []
    where: list[tuple[int, int]] = []
    for r in ranges:
        reader = wire.read_range(bootstrap, r, read_committed=read_committed)
        try:
            for batch in reader:
                values += batch.column("value").to_pylist()
                where += [(r.partition, o) for o in batch.column("offset").to_pylist()]
                if len(values) >= limit:
                    break
        finally:
            reader.close()
        if len(values) >= limit:
            break
    return values[:limit], where[:limit]


def _run_in_process(tasks: Sequence[RangeTask], on_progress: ProgressCallback | None) -> list[RangeResult]:
    results = []
    for i, task in enumerate(tasks):
        try:
            results.append(write_range(task))
        except (wire.RangeReadError, json_values.ValueSchemaError) as exc:
            raise ExportError(str(exc)) from None
        if on_progress is not None:
            on_progress(i + 1, len(tasks), sum(r.records for r in results))
    return results


_PY_ERROR = re.compile(
    r"(?:RangeReadError|CorruptRecordError|BrokerUnreachableError|OffsetSpecError|ValueSchemaError): ([^\n]+)")


def _run_on_spark(spark: Any, tasks: Sequence[RangeTask], on_progress: ProgressCallback | None) -> list[RangeResult]:
    """One Spark job, one task per range; the driver waits for all of them (or the first failure)."""
    sc = spark.sparkContext
    group = f"pulllog-export-{tasks[0].run_id}"
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, f"pulllog export {tasks[0].range.topic}", interruptOnCancel=True)
            box["results"] = sc.parallelize(list(tasks), len(tasks)).map(write_range).collect()
        except BaseException as exc:  # reported on the calling thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="pulllog-export-job", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.25)
            if on_progress is not None:
                done = _completed_tasks(sc, group)
                on_progress(done, len(tasks), -1)
    except BaseException:
        sc.cancelJobGroup(group)
        raise
    if "error" in box:
        raise ExportError(_spark_error_line(box["error"])) from None
    results: list[RangeResult] = box["results"]
    if on_progress is not None:
        on_progress(len(tasks), len(tasks), sum(r.records for r in results))
    return results


def _completed_tasks(sc: Any, group: str) -> int:
    tracker = sc.statusTracker()
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
    return done


def _spark_error_line(exc: BaseException) -> str:
    """The one line that matters from a Spark job failure (a task's Python error, if any)."""
    text = str(exc)
    m = _PY_ERROR.search(text)
    if m:
        return m[1].strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return f"the Spark job failed: {first[:300]}"


def covered(results: Iterable[RangeResult]) -> dict[int, tuple[int, int]]:
    """Offsets covered per partition: (first start, last end) over the results."""
    out: dict[int, tuple[int, int]] = {}
    for r in results:
        lo, hi = out.get(r.range.partition, (r.range.start, r.range.end))
        out[r.range.partition] = (min(lo, r.range.start), max(hi, r.range.end))
    return out
