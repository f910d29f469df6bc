"""``pulllog inspect segment FILE``: look inside a segment's files, like kafka-dump-log.

For a ``.log``: every batch (offsets, position, size, stored and computed CRC, codec,
timestamps, producer, transaction and control flags), with ``--records`` every record too.
For a ``.index`` / ``.timeindex``: every entry, checked against the sibling ``.log``. Damage
is reported with its file position, never raised; ``pulllog.log.verify`` finds it (with the
checks recovery and index loading use), this module
renders it as aligned columns for people (through a rich Console: colour on terminals, one
line per row where the terminal is too narrow), JSON lines (``--json``) for programs, or
only a verdict (``--verify``).

Exit codes (``pulllog.cli.errors``): 0 success, and with --verify nothing wrong; 1 --verify
found a problem; 2 the file is missing, unreadable, or not a segment file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import click
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from pulllog.log.index import OFFSET_ENTRY, TIME_ENTRY
from pulllog.log.verify import (
    MAX_CODEC,
    BatchView,
    Damage,
    Decoded,
    IndexProblem,
    LogMap,
    Problem,
    decode_batch,
    index_entries,
    offset_index_problems,
    time_index_problems,
    walk_log,
)
from pulllog.records.batch import BatchHeader, TimestampType
from pulllog.records.control import ControlRecord, ControlType
from pulllog.records.compression import Compression

from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples
from .json_bytes import json_bytes

__all__ = ["format_time", "inspect", "json_bytes", "preview"]

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
_PREVIEW_WIDTH = 60


# ---------------------------------------------------------------------------- log summary


@dataclass(slots=True)
class LogSummary:
    """Totals of one walk: what the last line of the output says."""

    file_size: int
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    problems: int = 0
    first_problem: tuple[int, Problem] | None = None  # (file position, problem)
    records_checked: bool = True  # every batch's records were decoded

    def add(self, item: BatchView | Damage, decoded: Decoded | None) -> None:
        if isinstance(item, Damage):
            self._problem(item.position, item.problem)
            return
        self.batches += 1
        if decoded is None:
            self.records_checked = False
        if item.crc_valid:
            h = item.header
            self.records += max(h.records_count, 0)
            if self.first_offset is None:
                self.first_offset = h.base_offset
            self.last_offset = h.last_offset
        problem = item.problem or (decoded.problem if decoded else None)
        if problem is not None:
            self._problem(item.position, problem)

    def _problem(self, position: int, problem: Problem) -> None:
        self.problems += 1
        if self.first_problem is None:
            self.first_problem = (position, problem)

    def line(self) -> str:
        offsets = (
            "no offsets"
            if self.first_offset is None
            else f"offsets {self.first_offset}..{self.last_offset}"
        )
        head = ", ".join(
            (
                plural(self.batches, "batch"),
                plural(self.records, "record"),
                plural(self.file_size, "byte"),
                offsets,
            )
        )
        if self.first_problem is None:
            return f"{head}; all valid" if self.records_checked else f"{head}; all CRCs valid"
        position, problem = self.first_problem
        count = plural(self.problems, "problem")
        return f"{head}; {count}, first bad position {position}: {problem}"


def plural(count: int, noun: str) -> str:
    """``plural(1, "batch")`` is "1 batch", ``plural(2, "entry")`` is "2 entries"."""
    if count == 1:
        return f"1 {noun}"
    if noun.endswith("y"):
        return f"{count} {noun[:-1]}ies"
    return f"{count} {noun}{'es' if noun.endswith(('s', 'ch')) else 's'}"


# ---------------------------------------------------------------------------- index entries


@dataclass(frozen=True, slots=True)
class OffsetIndexEntry:
    slot: int
    relative_offset: int
    position: int

    @property
    def file_position(self) -> int:
        return self.slot * OFFSET_ENTRY.size


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    slot: int
    timestamp: int
    relative_offset: int

    @property
    def file_position(self) -> int:
        return self.slot * TIME_ENTRY.size


# ---------------------------------------------------------------------------- formatting


def format_time(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC; -1 (no timestamp) as "none"."""
    if ms == -1:
        return "none"
    if ms < 0:
        return "invalid"
    try:
        t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    except OverflowError:
        return "out of range"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def preview(data: bytes | None, width: int = _PREVIEW_WIDTH) -> str:
    """Bytes for a table cell: a quoted string if utf-8, else a bytes literal, shortened."""
    if data is None:
        return "null"
    try:
        text = repr(data.decode("utf-8"))
    except UnicodeDecodeError:
        text = repr(data)
    if len(text) <= width:
        return text
    return f"{text[: width - 1]}… ({len(data)} bytes)"


def _codec_name(h: BatchHeader) -> str:
    codec = h.attributes & 0x07
    return Compression(codec).name.lower() if codec <= MAX_CODEC else f"codec {codec}"


def _timestamp_type_name(h: BatchHeader) -> str:
    return "LogAppendTime" if h.timestamp_type is TimestampType.LOG_APPEND_TIME else "CreateTime"


def _control_name(control: ControlRecord | None) -> str | None:
    if control is None:
        return None
    if isinstance(control.type, ControlType):
        return control.type.name
    return f"type {control.type}"


def _problem_json(problem: Problem | None) -> dict[str, str] | None:
    return None if problem is None else {"kind": problem.kind, "message": str(problem)}


# ---------------------------------------------------------------------------- reports


class Report(Protocol):
    """Where the command sends what it finds: columns for people, JSON lines, or nothing."""

    def start(self, fields: dict[str, Any]) -> None: ...
    def batch(self, view: BatchView, decoded: Decoded | None, records: bool) -> None: ...
    def damage(self, damage: Damage) -> None: ...
    def entry(self, entry: OffsetIndexEntry | TimeIndexEntry, problem: Problem | None) -> None: ...
    def problem(self, problem: IndexProblem) -> None: ...
    def hidden(self, count: int, what: str) -> None: ...
    def finish(self, summary: str, fields: dict[str, Any]) -> None: ...


class SilentReport:
    """--verify: only the verdict is printed, by the command itself."""

    def start(self, fields: dict[str, Any]) -> None: ...
    def batch(self, view: BatchView, decoded: Decoded | None, records: bool) -> None: ...
    def damage(self, damage: Damage) -> None: ...
    def entry(self, entry: OffsetIndexEntry | TimeIndexEntry, problem: Problem | None) -> None: ...
    def problem(self, problem: IndexProblem) -> None: ...
    def hidden(self, count: int, what: str) -> None: ...
    def finish(self, summary: str, fields: dict[str, Any]) -> None: ...


class JsonReport:
    """One JSON object per line, each with a "type"; keys and values as consume --format json writes them (pulllog.cli.json_bytes)."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset

    def _emit(self, obj: dict[str, Any]) -> None:
        click.echo(json.dumps(obj))  # ASCII with \u escapes: safe on any terminal encoding

    def start(self, fields: dict[str, Any]) -> None:
        self._emit({"type": "segment", **fields})

    def batch(self, view: BatchView, decoded: Decoded | None, records: bool) -> None:
        h = view.header
        problem = view.problem or (decoded.problem if decoded else None)
        self._emit(
            {
                "type": "batch",
                "position": view.position,
                "size": view.size,
                "base_offset": h.base_offset,
                "last_offset": h.last_offset,
                "records_count": h.records_count,
                "crc_stored": h.crc,
                "crc_computed": view.computed_crc,
                "crc_valid": view.crc_valid,
                "compression": _codec_name(h),
                "timestamp_type": _timestamp_type_name(h),
                "first_timestamp": h.base_timestamp,
                "first_time": format_time(h.base_timestamp),
                "max_timestamp": h.max_timestamp,
                "max_time": format_time(h.max_timestamp),
                "producer_id": h.producer_id,
                "producer_epoch": h.producer_epoch,
                "base_sequence": h.base_sequence,
                "partition_leader_epoch": h.partition_leader_epoch,
                "transactional": h.is_transactional,
                "control": h.is_control,
                "control_type": _control_name(decoded.control) if decoded else None,
                "delete_horizon_ms": h.delete_horizon_ms if h.has_delete_horizon else None,
                "valid": problem is None,
                "problem": _problem_json(problem),
            }
        )
        if records and decoded is not None:
            for r in decoded.records:
                self._emit(
                    {
                        "type": "record",
                        "batch_position": view.position,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "time": format_time(r.timestamp),
                        "key": json_bytes(r.key),
                        "value": json_bytes(r.value),
                        "headers": [{"key": k, "value": json_bytes(v)} for k, v in r.headers],
                    }
                )

    def damage(self, damage: Damage) -> None:
        self._emit(
            {
                "type": "damage",
                "position": damage.position,
                "size": damage.size,
                "offset": damage.offset,
                "resumes": damage.resumes,
                "problem": _problem_json(damage.problem),
            }
        )

    def entry(self, entry: OffsetIndexEntry | TimeIndexEntry, problem: Problem | None) -> None:
        obj: dict[str, Any] = {
            "type": "entry",
            "slot": entry.slot,
            "file_position": entry.file_position,
            "relative_offset": entry.relative_offset,
            "offset": self.base_offset + entry.relative_offset,
        }
        if isinstance(entry, OffsetIndexEntry):
            obj["position"] = entry.position
        else:
            obj["timestamp"] = entry.timestamp
            obj["time"] = format_time(entry.timestamp)
        obj["valid"] = problem is None
        obj["problem"] = _problem_json(problem)
        self._emit(obj)

    def problem(self, problem: IndexProblem) -> None:
        self._emit(
            {
                "type": "damage",
                "file_position": problem.file_position,
                "problem": _problem_json(problem.problem),
            }
        )

    def hidden(self, count: int, what: str) -> None:
        pass  # the summary's totals already say how many there are

    def finish(self, summary: str, fields: dict[str, Any]) -> None:
        self._emit({"type": "summary", **fields, "text": summary})


class Listing:
    """Rows under a header, aligned in columns when the console is wide enough for them,
    else one wrapped ``Header: value`` line per row.

    Laid out here rather than with ``rich.table.Table``: a segment holds tens of thousands
    of batches, and rich's table lays out every cell several times (about a millisecond a
    row). Narrow terminals get whole values on wrapped lines, never cells cut short
    ("0xc2f8…"): a truncated CRC or offset is worse than none.
    """

    _GAP = "  "
    _CHUNK = 2000  # lines per console.print: bounded memory, few calls

    def __init__(self, title: str, columns: Sequence[tuple[str, str]]) -> None:
        self.title = title
        self.columns = columns  # (header, "left" | "right"); "\n" in a header stacks it
        self.rows: list[list[tuple[list[str], str]]] = []  # cells: (lines, style)
        self.section_ends: set[int] = set()

    def add_row(self, *cells: str | Text) -> None:
        self.rows.append(
            [
                (c.plain.split("\n"), str(c.style)) if isinstance(c, Text) else (c.split("\n"), "")
                for c in cells
            ]
        )

    def end_section(self) -> None:
        if self.rows:
            self.section_ends.add(len(self.rows) - 1)

    def print(self, console: Console) -> None:
        if not self.rows:
            return
        headers = [header.split("\n") for header, _ in self.columns]
        widths = [max(map(cell_len, lines)) for lines in headers]
        for row in self.rows:
            for i, (lines, _) in enumerate(row):
                widths[i] = max(widths[i], *map(cell_len, lines))
        total = sum(widths) + len(self._GAP) * (len(widths) - 1)
        console.print(Text(self.title, style="bold"))
        if total <= console.width:
            self._print_columns(console, headers, widths, total)
        else:
            self._print_lines(console)

    def _print_columns(
        self, console: Console, headers: list[list[str]], widths: list[int], total: int
    ) -> None:
        height = max(map(len, headers))
        head = [[""] * (height - len(lines)) + lines for lines in headers]  # bottom-aligned
        out = [
            self._line([(h, "bold") for h in line], widths) for line in zip(*head)
        ]
        out.append(Text("─" * total, style="dim"))
        for r, row in enumerate(self.rows):
            for j in range(max(len(lines) for lines, _ in row)):
                cells = [(lines[j] if j < len(lines) else "", style) for lines, style in row]
                out.append(self._line(cells, widths))
            if r in self.section_ends and r + 1 < len(self.rows):
                out.append(Text())
            if len(out) >= self._CHUNK:
                self._flush(console, out)
        self._flush(console, out)

    def _line(self, cells: list[tuple[str, str]], widths: list[int]) -> Text:
        line = Text()
        for i, ((text, style), width, (_, justify)) in enumerate(
            zip(cells, widths, self.columns)
        ):
            pad = " " * (width - cell_len(text))
            if i:
                line.append(self._GAP)
            if justify == "right":
                line.append(pad)
            line.append(text, style=style)
            if justify != "right":
                line.append(pad)
        line.rstrip()
        return line

    def _print_lines(self, console: Console) -> None:
        lines = []
        for row in self.rows:
            line = Text()
            for (header, _), (cell, style) in zip(self.columns, row):
                if cell == [""]:
                    continue
                if line:
                    line.append(self._GAP)
                line.append(header.replace("\n", " ") + ": ", style="dim")
                line.append(", ".join(cell), style=style)
            lines.append(line)
        wraps = any(line.cell_len > console.width for line in lines)
        for i, line in enumerate(lines):
            if wraps and i:
                console.print()  # a blank line keeps wrapped rows apart
            console.print(line)

    @staticmethod
    def _flush(console: Console, out: list[Text]) -> None:
        if out:
            console.print(Text("\n").join(out), soft_wrap=True)
            out.clear()


class TableReport:
    """Columns for people; damage in red, and every problem listed again under them."""

    def __init__(self, console: Console, name: str, base_offset: int) -> None:
        self.console = console
        self.name = name
        self.base_offset = base_offset
        self.listing = Listing("", ())
        self.records = Listing("Records", _RECORD_COLUMNS)
        self.problems: list[tuple[str, Problem]] = []
        self.notes: list[str] = []

    def start(self, fields: dict[str, Any]) -> None:
        kind = fields["kind"]
        base = fields["base_offset"]
        title = f"{self.name}: {kind}, {fields['size']} bytes"
        if base is not None:
            title += f", base offset {base}"
        if fields.get("checked_against"):
            title += f", checked against {fields['checked_against']}"
        self.console.print(Text(title, style="bold"))
        if kind == "log":
            self.listing = Listing("Batches", _BATCH_COLUMNS)
        elif kind == "offset index":
            self.listing = Listing("Entries", _OFFSET_INDEX_COLUMNS)
        else:
            self.listing = Listing("Entries", _TIME_INDEX_COLUMNS)

    def batch(self, view: BatchView, decoded: Decoded | None, records: bool) -> None:
        h = view.header
        problem = view.problem or (decoded.problem if decoded else None)
        attributes = [_codec_name(h), _timestamp_type_name(h)]
        if h.is_transactional:
            attributes.append("transactional")
        if h.is_control:
            marker = _control_name(decoded.control) if decoded else None
            attributes.append(f"control {marker or '(marker unread)'}")
        if h.has_delete_horizon:
            attributes.append("delete horizon")
        crc = f"{h.crc:#010x}"
        if not view.crc_valid:
            crc += f"\ncomputed {view.computed_crc:#010x}"
        producer = (
            "none"
            if h.producer_id == -1
            else f"{h.producer_id} / {h.producer_epoch} / {h.base_sequence}"
        )
        self.listing.add_row(
            str(view.position),
            f"{h.base_offset}..{h.last_offset}",
            str(h.records_count),
            str(view.size),
            Text(crc, style="" if view.crc_valid else "red"),
            "\n".join(attributes),
            _time_cell(h.base_timestamp),
            _time_cell(h.max_timestamp),
            producer,
            str(h.partition_leader_epoch),
            _status(problem),
        )
        if problem is not None:
            self.problems.append((f"position {view.position}", problem))
        if records and decoded is not None and decoded.records:
            self.records.end_section()
            for r in decoded.records:
                headers = ", ".join(f"{repr(k)[1:-1]}={preview(v, 30)}" for k, v in r.headers)
                self.records.add_row(
                    str(view.position),
                    str(r.offset),
                    _time_cell(r.timestamp),
                    preview(r.key),
                    preview(r.value),
                    headers,
                )

    def damage(self, damage: Damage) -> None:
        offset = "" if damage.offset is None else str(damage.offset)
        cells = [str(damage.position), offset, "", str(damage.size)]
        cells += [""] * (len(_BATCH_COLUMNS) - len(cells) - 1)
        self.listing.add_row(*cells, _status(damage.problem))
        self.problems.append((f"position {damage.position}", damage.problem))

    def entry(self, entry: OffsetIndexEntry | TimeIndexEntry, problem: Problem | None) -> None:
        offset = self.base_offset + entry.relative_offset
        cells = [str(entry.slot), str(entry.file_position)]
        if isinstance(entry, OffsetIndexEntry):
            cells += [str(entry.relative_offset), str(offset), str(entry.position)]
        else:
            cells += [_time_cell(entry.timestamp), str(entry.relative_offset), str(offset)]
        self.listing.add_row(*cells, _status(problem))
        if problem is not None:
            where = f"entry {entry.slot} at file position {entry.file_position}"
            self.problems.append((where, problem))

    def problem(self, problem: IndexProblem) -> None:
        self.problems.append((f"file position {problem.file_position}", problem.problem))

    def hidden(self, count: int, what: str) -> None:
        if count:
            self.notes.append(f"{plural(count, 'more ' + what)} not shown (--limit)")

    def finish(self, summary: str, fields: dict[str, Any]) -> None:
        self.listing.print(self.console)
        self.records.print(self.console)
        for note in self.notes:
            self.console.print(Text(note, style="dim"))
        if self.problems:
            self.console.print(Text("Problems:", style="bold red"))
            for where, problem in self.problems:
                self.console.print(Text(f"  {where}: {problem}", style="red"))
        style = "bold red" if self.problems else "bold green"
        self.console.print(Text(f"Summary: {summary}", style=style))


_BATCH_COLUMNS = (
    ("Position", "right"),
    ("Offsets", "right"),
    ("Records", "right"),
    ("Size", "right"),
    ("CRC", "left"),
    ("Attributes", "left"),
    ("First timestamp", "left"),
    ("Max timestamp", "left"),
    ("Producer\nid / epoch / seq", "left"),
    ("Leader\nepoch", "right"),
    ("Status", "left"),
)
_RECORD_COLUMNS = (
    ("Batch", "right"),
    ("Offset", "right"),
    ("Timestamp", "left"),
    ("Key", "left"),
    ("Value", "left"),
    ("Headers", "left"),
)
_OFFSET_INDEX_COLUMNS = (
    ("Entry", "right"),
    ("File position", "right"),
    ("Relative offset", "right"),
    ("Offset", "right"),
    ("Position", "right"),
    ("Check", "left"),
)
_TIME_INDEX_COLUMNS = (
    ("Entry", "right"),
    ("File position", "right"),
    ("Timestamp", "left"),
    ("Relative offset", "right"),
    ("Offset", "right"),
    ("Check", "left"),
)


def _time_cell(ms: int) -> str:
    return f"{ms}\n{format_time(ms)}"


def _status(problem: Problem | None) -> Text:
    return Text("ok", style="green") if problem is None else Text(problem.kind, style="bold red")


# ---------------------------------------------------------------------------- command


def _console() -> Console:
    console = Console(markup=False, emoji=False, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped to a file or a pager: keep table rows on one line each rather than wrap at 80.
        console = Console(markup=False, emoji=False, highlight=False, width=1000)
    return console


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except IsADirectoryError:
        raise CliError(
            f"{path} is a directory; give one segment file (.log, .index or .timeindex)",
            EXIT_USAGE,
        ) from None
    except PermissionError:
        raise CliError(f"{path}: permission denied", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None


def _base_offset_from_name(path: Path) -> int | None:
    return int(path.stem) if path.stem.isdigit() else None


@click.group(epilog=examples(
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.log --records",
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.index --verify",
))
def inspect() -> None:
    """Look inside pulllog's files on disk (and Apache Kafka's: the format is the same)."""


@inspect.command(epilog=examples(
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.log",
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.log --records --limit 5",
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.timeindex --json",
    "pulllog inspect segment pulllog-data/orders-0/00000000000000000000.log --verify",
))
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--records", is_flag=True, help="Also list every record of each batch shown.")
@click.option(
    "--verify",
    is_flag=True,
    help="Check everything (CRCs, structure, record contents, index entries) and print only "
    "the verdict; exit 1 naming the first bad position.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Show at most N batches or index entries; the summary still covers the whole file.",
)
def segment(file: Path, records: bool, verify: bool, as_json: bool, limit: int | None) -> None:
    """Show the batches of a segment's .log, or the entries of its .index / .timeindex.

    Damage (torn tails, CRC mismatches, junk, magic 0/1 message sets, bad lengths, index
    entries that do not match the .log) is reported with its file position, never raised.
    """
    if file.suffix not in SEGMENT_SUFFIXES and not file.is_dir() and file.exists():
        raise CliError(
            f"{file}: not a segment file; expected a .log, .index or .timeindex file",
            EXIT_USAGE,
        )
    buf = _read(file)
    base_offset = _base_offset_from_name(file)
    if base_offset is None and file.suffix != ".log" and not verify:
        click.echo(
            f"warning: {file.name} is not named by a base offset; assuming base offset 0",
            err=True,
        )
    if verify:
        report: Report = SilentReport()
    elif as_json:
        report = JsonReport(base_offset or 0)
    else:
        report = TableReport(_console(), file.name, base_offset or 0)
    if file.suffix == ".log":
        verdict = _inspect_log(file, buf, base_offset, report, records, verify, limit)
    else:
        verdict = _inspect_index(file, buf, base_offset, report, verify, limit)
    if verify:
        if verdict.first_bad is not None:
            raise CliError(f"{file.name}: {verdict.first_bad}", EXIT_PROBLEM)
        if as_json:
            JsonReport(base_offset or 0).finish(verdict.summary, verdict.fields)
        else:
            click.echo(f"ok: {file.name}: {verdict.summary}")


@dataclass(frozen=True, slots=True)
class Verdict:
    summary: str  # the summary line
    fields: dict[str, Any]  # the same, for the JSON summary object
    first_bad: str | None  # what --verify prints when something is wrong


def _inspect_log(
    path: Path,
    buf: bytes,
    base_offset: int | None,
    report: Report,
    records: bool,
    verify: bool,
    limit: int | None,
) -> Verdict:
    report.start({"file": str(path), "kind": "log", "base_offset": base_offset, "size": len(buf)})
    summary = LogSummary(file_size=len(buf))
    shown = 0
    for item in walk_log(buf, segment_base_offset=base_offset):
        if isinstance(item, Damage):
            summary.add(item, None)
            report.damage(item)
            continue
        show = limit is None or shown < limit
        decoded = None
        # Control batches are decoded for their COMMIT/ABORT marker: one tiny record.
        if verify or (show and (records or item.header.is_control)):
            decoded = decode_batch(buf, item)
        summary.add(item, decoded)
        if show:
            report.batch(item, decoded, records)
            shown += 1
    report.hidden(summary.batches - shown, "batch")
    first = summary.first_problem
    fields = {
        "batches": summary.batches,
        "records": summary.records,
        "bytes": summary.file_size,
        "first_offset": summary.first_offset,
        "last_offset": summary.last_offset,
        "valid": first is None,
        "records_checked": summary.records_checked,
        "problems": summary.problems,
        "first_bad_position": first[0] if first else None,
        "first_problem": _problem_json(first[1] if first else None),
    }
    text = summary.line()
    report.finish(text, fields)
    first_bad = f"invalid batch at position {first[0]}: {first[1]}" if first else None
    return Verdict(text, fields, first_bad)


def _inspect_index(
    path: Path,
    buf: bytes,
    base_offset: int | None,
    report: Report,
    verify: bool,
    limit: int | None,
) -> Verdict:
    base = base_offset or 0
    log_path = path.with_suffix(".log")
    log: LogMap | None = None
    cannot_check: str | None = None
    try:
        log = LogMap.of(log_path.read_bytes(), base_offset)
    except OSError as exc:
        cannot_check = f"cannot check against {log_path.name}: {exc.strerror or exc}"
        if not verify:  # --verify says it in its one error line
            click.echo(f"warning: {path.name}: {cannot_check}; showing entries only", err=True)
    entries: Sequence[OffsetIndexEntry | TimeIndexEntry]
    if path.suffix == ".index":
        kind = "offset index"
        raw, shape = index_entries(buf, OFFSET_ENTRY)
        checks = dict(offset_index_problems(raw, base, log, log_path.name))
        entries = [OffsetIndexEntry(slot, rel, pos) for slot, (rel, pos) in enumerate(zip(*raw))]
    else:
        kind = "time index"
        raw, shape = index_entries(buf, TIME_ENTRY)
        checks = dict(time_index_problems(raw, base, log, log_path.name))
        entries = [TimeIndexEntry(slot, ts, rel) for slot, (ts, rel) in enumerate(zip(*raw))]
    report.start(
        {
            "file": str(path),
            "kind": kind,
            "base_offset": base_offset,
            "size": len(buf),
            "checked_against": log_path.name if log is not None else None,
        }
    )
    shown = entries if limit is None else entries[:limit]
    for entry in shown:
        report.entry(entry, checks.get(entry.slot))
    report.hidden(len(entries) - len(shown), "entry")
    for file_problem in shape:
        report.problem(file_problem)

    # Every problem in file order, each as (file position, where, what).
    bad = [
        (e.file_position, f"entry {e.slot} at file position {e.file_position}", checks[e.slot])
        for e in entries
        if e.slot in checks
    ]
    bad += [(p.file_position, f"file position {p.file_position}", p.problem) for p in shape]
    bad.sort(key=lambda item: item[0])
    first_offset = base + entries[0].relative_offset if entries else None
    last_offset = base + entries[-1].relative_offset if entries else None
    offsets = "no offsets" if not entries else f"offsets {first_offset}..{last_offset}"
    text = f"{plural(len(entries), 'entry')}, {plural(len(buf), 'byte')}, {offsets}"
    first_bad = f"{bad[0][1]}: {bad[0][2]}" if bad else None
    if first_bad:
        text += f"; {plural(len(bad), 'problem')}, first {first_bad}"
    elif log is not None:
        text += f"; consistent with {log_path.name}"
    else:
        text += f"; well formed, but {cannot_check}"
        first_bad = cannot_check  # a --verify that could not check must not pass
    fields = {
        "entries": len(entries),
        "bytes": len(buf),
        "first_offset": first_offset,
        "last_offset": last_offset,
        "checked_against": log_path.name if log is not None else None,
        "valid": not bad,
        "problems": len(bad),
        "first_bad_position": bad[0][0] if bad else None,
        "first_problem": _problem_json(bad[0][2] if bad else None),
    }
    report.finish(text, fields)
    return Verdict(text, fields, first_bad)
