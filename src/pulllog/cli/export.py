"""``pulllog export --parquet OUT --topic T``: a topic to Parquet, incrementally, exactly once.

The work is ``pulllog.spark.export`` (the protocol is in ``pulllog.spark.progress``); this
module parses options, starts Spark when there is something to do, shows progress on a
terminal and prints the summary. Run it again to export only what is new; ``--full`` starts
over. ``--engine arrow`` does the same in this process with pyarrow, no JVM. It reads committed
data by default (``--isolation-level read_committed``): an aborted transaction never reaches
Parquet, and an open one waits for a later run.

Exit codes (``pulllog.cli.errors``): 0 success (also when nothing is new); 1 the export could
not run or finish (Java missing, Spark failing to start, unknown topic, a directory that holds
another topic's export, a broker that cannot be reached); 2 bad usage.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..client.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    KafkaError,
    UnsupportedByBrokerError,
)
from .common import bootstrap_server_option, console, parse_assignments
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["export"]


@click.command(epilog=examples(
    "pulllog export --parquet out/ --topic orders                  # again later: only what is new",
    "pulllog export --parquet out/ --topic orders --engine arrow   # no JVM",
    "pulllog export --parquet out/ --topic orders --from 2026-11-22T00:00:00+00:00 --partition-by date",
    "pulllog export --parquet out/ --topic orders --value-format json --value-schema 'id long, amount double'",
    "pulllog export --parquet /shared/out --topic orders --master spark://host:7077 "
    "--spark-conf spark.executor.memory=4g",
))
@click.option("--parquet", "out", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory; it keeps the export's progress, so the next run exports only new records.")
@click.option("--topic", required=True, help="The topic to export.")
@bootstrap_server_option
@click.option("--from", "from_", metavar="WHERE", default=None,
              help="Where a new export starts: earliest (default), an offset, P:O[,P:O...], a JSON map, "
                   "or an ISO datetime. Partitions the export already has progress for continue from it.")
@click.option("--to", metavar="WHERE", default=None,
              help="Where to stop (exclusive): latest (default, the last stable offset now, or the high watermark "
                   "with --isolation-level read_uncommitted), or as --from.")
@click.option("--full", is_flag=True, help="Start over: delete what an earlier export wrote to DIR.")
@click.option("--partition-by", type=click.Choice(["topic", "date"]), default="topic", show_default=True,
              help="Directory layout: topic=T/partition=P/, or date=YYYY-MM-DD/ (UTC record timestamp).")
@click.option("--engine", type=click.Choice(["spark", "arrow"]), default="spark", show_default=True,
              help="spark: a Spark job (local or --master); arrow: this process only, pyarrow, no JVM.")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL. On a cluster, DIR must be a path every executor sees (a shared mount).")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting, e.g. --spark-conf spark.executor.memory=4g (repeatable).")
@click.option("--max-offsets-per-file", type=int, default=None, metavar="N",
              help="Cut each partition's range into files (and tasks) of at most N offsets. [default: 500000]")
@click.option("--value-format", type=click.Choice(["raw", "json"]), default="raw", show_default=True,
              help="json: also parse each value as a JSON object into the struct column value_json "
                   "(one schema per export, fixed by its first run; a value that does not fit fails the run).")
@click.option("--value-schema", default=None, metavar="'NAME TYPE, ...'",
              help="The value_json fields, e.g. 'id long, name string, paid boolean' (types: string, long, int, "
                   "double, float, boolean, json). Default: inferred from the first 1000 records.")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_committed", show_default=True,
              help="read_committed: records of committed transactions (and non-transactional ones) up to the last "
                   "stable offset, so an aborted transaction never reaches Parquet; read_uncommitted: every record "
                   "up to the high watermark.")
def export(out: Path, topic: str, bootstrap_server: str, from_: str | None, to: str | None, full: bool,
           partition_by: str, engine: str, master: str, spark_conf: tuple[str, ...],
           max_offsets_per_file: int | None, value_format: str, value_schema: str | None,
           isolation_level: str) -> None:
    """Export TOPIC's records to Parquet in DIR, exactly once: only what earlier runs did not."""
    from ..spark.export import DEFAULT_MAX_OFFSETS_PER_FILE, ExportError
    from ..spark.export import export as run_export
    from ..spark.offsets import OffsetSpecError, parse_offset_spec
    from ..spark.progress import ExportDirError
    from ..spark.session import SparkStartError, find_java

    conf = parse_assignments(spark_conf, "--spark-conf", "spark.executor.memory=4g")
    try:
        start = parse_offset_spec(from_, what="--from")
        end = parse_offset_spec(to, what="--to")
    except OffsetSpecError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    per_file = DEFAULT_MAX_OFFSETS_PER_FILE if max_offsets_per_file is None else max_offsets_per_file
    if per_file < 1:
        raise CliError(f"--max-offsets-per-file {per_file}: must be at least 1", EXIT_USAGE)

    session: dict[str, Any] = {}
    err = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[records]}"), TimeElapsedColumn(),
                        console=err, transient=True, disable=not err.is_terminal)
    bar: dict[str, Any] = {}

    def on_plan(plan: Any) -> None:
        for note in plan.notes:
            err.print(f"warning: {note}", markup=False, highlight=False)
        if not plan.ranges:
            return
        if engine == "spark":
            from ..spark.session import start as start_spark

            began = time.monotonic()
            with err.status("starting Spark ...") if err.is_terminal else _nothing():
                session["spark"] = start_spark(master, conf, app_name=f"pulllog export {topic}",
                                               log_path=out.resolve() / "_pulllog" / "spark.log")
            session["startup"] = time.monotonic() - began
        progress.start()
        bar["id"] = progress.add_task(f"exporting {topic}", total=len(plan.ranges), records="")

    def on_progress(done: int, total: int, records: int) -> None:
        if "id" in bar:
            progress.update(bar["id"], completed=done, records=f"{records:,} records" if records >= 0 else "")

    try:
        if engine == "spark":
            try:
                import pyspark  # noqa: F401
            except ImportError:
                raise SparkStartError("pyspark is not installed: pip install 'pulllog[spark]' "
                                      "(or use --engine arrow, which needs only pyarrow)") from None
            find_java()  # before the broker is asked anything: the most basic problem first
        result = run_export(bootstrap_server, topic, out, start=start, end=end, full=full,
                            partition_by=partition_by, engine=engine, spark=_Lazy(session),
                            max_offsets_per_file=per_file, on_plan=on_plan, on_progress=on_progress,
                            value_format=value_format, value_schema=value_schema,
                            read_committed=isolation_level == "read_committed")
    except (ExportError, ExportDirError, SparkStartError, OffsetSpecError) as exc:
        raise CliError(str(exc), EXIT_PROBLEM) from None
    except BrokerUnreachableError as exc:
        raise CliError(str(exc), EXIT_PROBLEM) from None
    except ConnectionClosedError as exc:
        raise CliError(f"{exc}; is the broker still running?", EXIT_PROBLEM) from None
    except (KafkaError, UnsupportedByBrokerError) as exc:
        raise CliError(str(exc), EXIT_PROBLEM) from None
    except OSError as exc:  # the output directory cannot be created or written
        where = exc.filename or out
        raise CliError(f"--parquet {out}: cannot write {where} ({exc.strerror or exc}); "
                       "pick a directory you can write", EXIT_PROBLEM) from None
    finally:
        progress.stop()
        if "spark" in session:
            session["spark"].stop()
    _summary(result, session.get("startup"))


class _Lazy:
    """The SparkSession ``on_plan`` starts only when there is work, passed on by attribute."""

    def __init__(self, box: dict[str, Any]) -> None:
        self._box = box

    def __getattr__(self, name: str) -> Any:
        return getattr(self._box["spark"], name)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _summary(result: Any, spark_startup: float | None) -> None:
    out = console()
    plan = result.plan
    for line in result.recovered:
        out.print(f"recovered: {line}")
    if not plan.ranges:
        upto = ", ".join(f"{p}: {o}" for p, o in sorted(plan.ends.items()))
        out.print(f"nothing new to export: {result.topic!r} is in {result.out} up to offsets {{{upto}}}")
        return
    per: dict[int, list[int]] = {}
    for r in result.results:
        row = per.setdefault(r.range.partition, [0, 0, 0])
        row[0] += r.records
        row[1] += len(r.files)
        row[2] += r.file_bytes
    table = Table(box=box.SIMPLE, title=f"{result.topic} -> {result.out}", title_justify="left")
    for col in ("partition", "from offset", "to offset (excl.)", "records", "files", "parquet"):
        table.add_column(col, justify="right")
    for p in sorted(plan.starts):
        if plan.ends[p] == plan.starts[p]:
            continue
        records, files, size = per.get(p, [0, 0, 0])
        table.add_row(str(p), f"{plan.starts[p]:,}", f"{plan.ends[p]:,}", f"{records:,}", str(files), _mb(size))
    out.print(table)
    secs = max(result.seconds, 1e-9)
    if result.value_schema is not None:
        out.print(f"values parsed as JSON into value_json: {result.value_schema}")
    out.print(f"exported {result.records:,} records ({_mb(result.value_bytes)} of keys and values) into "
              f"{result.files} files ({_mb(result.file_bytes)} of Parquet) in {secs:.1f} s "
              f"with the {result.engine} engine: {result.records / secs:,.0f} records/s, "
              f"{result.value_bytes / secs / 1e6:,.1f} MB/s")
    if spark_startup is not None:
        work = max(secs - spark_startup, 1e-9)
        out.print(f"of which Spark start-up took {spark_startup:.1f} s; the export itself "
                  f"{work:.1f} s ({result.records / work:,.0f} records/s)")
