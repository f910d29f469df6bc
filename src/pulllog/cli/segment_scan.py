"""Walk a segment's files without trusting them: the checks behind ``pulllog inspect segment``.

A partition directory ``<topic>-<partition>/`` holds segments named by their base offset,
zero-padded to 20 digits; every segment has three files:

``00000000000000000000.log``
    RecordBatch v2 batches back to back, exactly as on the wire (``pulllog.records.batch``).
``00000000000000000000.index``
    Sparse offset index, 8-byte entries: int32 offset relative to the base offset, int32
    position of a batch in the .log. Both strictly increase. An entry points at the start
    of the batch that holds its offset (Kafka indexes a batch by its last offset).
``00000000000000000000.timeindex``
    Time index, 12-byte entries: int64 timestamp (ms), int32 relative offset. Neither
    decreases. The timestamp is the largest one in the segment up to and including the
    batch holding the offset, so a time lookup that starts there cannot miss a record.

Index files are not preallocated, so their length is a multiple of the entry size; a partial
entry at the end, or trailing all-zero entries (space that was never trimmed), are damage.

Walking a .log, each position must hold a batch header. What the walk reports, and whether
it can go on (past some damage the position of the next batch is unknown):

* ``CRC mismatch``: CRC-32C of bytes 21..end differs from the stored one. Goes on only if
  the declared length lands on the end of the file or on something header-like; otherwise
  ``no batch here`` follows and the walk stops.
* ``bad header`` (negative lastOffsetDelta or count, unknown codec), ``offset order``
  (base offset not after the previous batch's, or below the segment's: the CRC does not
  cover offsets), ``bad records`` (``decode_batch``: records do not decompress or parse).
  The CRC holds, so the length is trusted and the walk goes on.
* ``magic 0 message set (unsupported)`` / ``magic 1 ...``: a legacy message set, stepped
  over when its length fits in the file.
* Stops: ``truncated batch`` (runs past the end: a torn write or a damaged batchLength),
  ``torn tail`` (too few bytes for a header), ``zero bytes`` (the rest is zeros),
  ``unknown magic`` (junk), ``bad batchLength`` (smaller than the header it covers).

Nothing here does I/O or raises on bad input: functions take bytes and return values, so
every kind of damage is a plain unit test.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pulllog.records.compression import Compression
from pulllog.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlRecord,
    Record,
    RecordBatch,
    TimestampType,
    compute_crc,
    read_header,
)

__all__ = [
    "BatchView",
    "Damage",
    "Decoded",
    "IndexProblem",
    "LogMap",
    "LogSummary",
    "OffsetIndexEntry",
    "Problem",
    "TimeIndexEntry",
    "check_offset_index",
    "check_time_index",
    "decode_batch",
    "plural",
    "read_offset_index",
    "read_time_index",
    "walk_log",
]

_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # a batchLength must cover the header
_MAGIC_POSITION = 16
# Smallest legacy message after the 12-byte offset+size prefix: crc, magic, attributes,
# (v1: timestamp), key length, value length.
_LEGACY_MIN_MESSAGE = {0: 14, 1: 22}
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
MAX_CODEC = max(Compression)


# ---------------------------------------------------------------------------- problems


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong, as a short kind (for tables) and a one-line explanation."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


# ---------------------------------------------------------------------------- .log walk


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch whose header could be read and whose length fits in the file."""

    position: int
    header: BatchHeader
    computed_crc: int
    problem: Problem | None = None

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def crc_valid(self) -> bool:
        return self.computed_crc == self.header.crc


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes at ``position`` that are not a RecordBatch v2 the walk could read."""

    position: int
    size: int  # bytes it covers; the rest of the file when the walk stops here
    problem: Problem
    resumes: bool = False  # the walk steps over it and goes on
    offset: int | None = None  # the offset field of a magic 0/1 message set


def walk_log(
    buf: bytes | bytearray | memoryview, *, segment_base_offset: int | None = None
) -> Iterator[BatchView | Damage]:
    """Yield every batch and every piece of damage in a .log, in file order. Never raises."""
    end = len(buf)
    pos = 0
    previous_last_offset: int | None = None  # of the last batch without a problem
    while pos < end:
        remaining = end - pos
        if remaining < _MAGIC_POSITION + 1:
            if _all_zero(buf, pos, end):
                yield _zero_tail(pos, remaining)
            else:
                yield Damage(
                    pos,
                    remaining,
                    Problem(
                        "torn tail",
                        f"{remaining} bytes at the end of the file, too few for a batch header "
                        "(a torn write, or junk)",
                    ),
                )
            return
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        magic = buf[pos + _MAGIC_POSITION]
        if magic in (0, 1):
            if magic == 0 and _all_zero(buf, pos, end):
                yield _zero_tail(pos, remaining)
                return
            damage = _legacy_message_set(magic, pos, base_offset, batch_length, remaining)
            yield damage
            if not damage.resumes:
                return
            pos += damage.size
            continue
        if magic != 2:
            yield Damage(
                pos,
                remaining,
                Problem(
                    "unknown magic",
                    f"magic byte {magic} (junk, or a damaged batch header); "
                    f"{remaining} bytes from here not examined",
                ),
            )
            return
        if batch_length < _MIN_BATCH_LENGTH:
            yield Damage(
                pos,
                remaining,
                Problem(
                    "bad batchLength",
                    f"batchLength {batch_length} is smaller than the {_MIN_BATCH_LENGTH} bytes "
                    f"of header it must cover; {remaining} bytes from here not examined",
                ),
            )
            return
        size = LOG_OVERHEAD + batch_length
        if size > remaining:
            yield Damage(
                pos,
                remaining,
                Problem(
                    "truncated batch",
                    f"batch of {size} bytes runs past the end of the file ({remaining} bytes "
                    "remain): a torn write, or a damaged batchLength",
                ),
            )
            return
        header = read_header(buf, pos)
        view = BatchView(pos, header, compute_crc(buf, pos))
        problem = _header_problem(view, previous_last_offset, segment_base_offset)
        if problem is not None:
            view = BatchView(pos, header, view.computed_crc, problem)
        else:
            previous_last_offset = header.last_offset
        yield view
        pos += size
        if not view.crc_valid and not _plausible_batch_start(buf, pos):
            yield Damage(
                pos,
                end - pos,
                Problem(
                    "no batch here",
                    "the damaged batch before this position has a wrong batchLength, "
                    f"so the next batch cannot be found; {end - pos} bytes from here "
                    "not examined",
                ),
            )
            return


def _header_problem(
    view: BatchView, previous_last_offset: int | None, segment_base_offset: int | None
) -> Problem | None:
    h = view.header
    if not view.crc_valid:
        return Problem(
            "CRC mismatch", f"stored {h.crc:#010x}, computed {view.computed_crc:#010x}"
        )
    if h.last_offset_delta < 0 or h.records_count < 0:
        return Problem(
            "bad header",
            f"negative lastOffsetDelta ({h.last_offset_delta}) or recordsCount "
            f"({h.records_count})",
        )
    codec = h.attributes & 0x07
    if codec > MAX_CODEC:
        return Problem("bad header", f"unknown compression codec id {codec}")
    if segment_base_offset is not None and h.base_offset < segment_base_offset:
        return Problem(
            "offset order",
            f"base offset {h.base_offset} is below the segment's base offset "
            f"{segment_base_offset} (from the file name)",
        )
    if previous_last_offset is not None and h.base_offset <= previous_last_offset:
        return Problem(
            "offset order",
            f"base offset {h.base_offset} does not follow the previous batch's last offset "
            f"{previous_last_offset}",
        )
    return None


def _legacy_message_set(
    magic: int, pos: int, offset: int, message_size: int, remaining: int
) -> Damage:
    kind = f"magic {magic} message set (unsupported)"
    size = LOG_OVERHEAD + message_size
    if message_size < _LEGACY_MIN_MESSAGE[magic] or size > remaining:
        return Damage(
            pos,
            remaining,
            Problem(
                kind,
                f"offset {offset}, but its length {message_size} does not fit; "
                f"{remaining} bytes from here not examined",
            ),
            offset=offset,
        )
    return Damage(
        pos,
        size,
        Problem(kind, f"offset {offset}, {size} bytes; pulllog reads only RecordBatch v2"),
        resumes=True,
        offset=offset,
    )


def _zero_tail(pos: int, remaining: int) -> Damage:
    return Damage(
        pos,
        remaining,
        Problem(
            "zero bytes",
            f"the last {remaining} bytes of the file are zeros "
            "(preallocated space, or an interrupted write)",
        ),
    )


def _plausible_batch_start(buf: bytes | bytearray | memoryview, pos: int) -> bool:
    """Does ``pos`` look like the end of the file or a header? Used after a CRC mismatch."""
    end = len(buf)
    if pos == end or _all_zero(buf, pos, end):
        return True
    if end - pos < _MAGIC_POSITION + 1:
        return False
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    magic = buf[pos + _MAGIC_POSITION]
    if base_offset < 0 or magic not in (0, 1, 2):
        return False
    minimum = _MIN_BATCH_LENGTH if magic == 2 else _LEGACY_MIN_MESSAGE[magic]
    return length >= minimum


def _all_zero(buf: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    chunk = 64  # small first: most callers are looking at a header that is not zeros
    while pos < end:
        piece = bytes(buf[pos : min(end, pos + chunk)])
        if piece.count(0) != len(piece):
            return False
        pos += len(piece)
        chunk = min(chunk * 2, 1 << 20)
    return True


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Decoded:
    """A batch's records, decompressed and parsed, or why they could not be."""

    records: tuple[Record, ...] = ()
    control: ControlRecord | None = None
    problem: Problem | None = None


def decode_batch(buf: bytes | bytearray | memoryview, view: BatchView) -> Decoded:
    """Decompress and parse the records of a batch from ``walk_log``. Never raises."""
    h = view.header
    batch = RecordBatch(h, bytes(buf[view.position : view.position + view.size]))
    try:
        records = tuple(batch.records())
        control = batch.control_record() if h.is_control else None
    except (ValueError, IndexError, struct.error) as exc:
        return Decoded(problem=Problem("bad records", str(exc) or type(exc).__name__))
    for record in records:
        if not h.base_offset <= record.offset <= h.last_offset:
            return Decoded(
                records,
                control,
                Problem(
                    "bad records",
                    f"record offset {record.offset} is outside the batch's offsets "
                    f"{h.base_offset}..{h.last_offset}",
                ),
            )
    if h.timestamp_type is TimestampType.LOG_APPEND_TIME:
        # With LogAppendTime every record's timestamp is the batch's (Kafka's rule).
        records = tuple(_with_timestamp(r, h.max_timestamp) for r in records)
    return Decoded(records, control)


def _with_timestamp(record: Record, timestamp: int) -> Record:
    return Record(
        record.offset, timestamp, record.key, record.value, record.headers, record.attributes
    )


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


# ---------------------------------------------------------------------------- index files


@dataclass(frozen=True, slots=True)
class OffsetIndexEntry:
    slot: int
    relative_offset: int
    position: int

    @property
    def file_position(self) -> int:
        return self.slot * _INDEX_ENTRY.size


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    slot: int
    timestamp: int
    relative_offset: int

    @property
    def file_position(self) -> int:
        return self.slot * _TIME_INDEX_ENTRY.size


@dataclass(frozen=True, slots=True)
class IndexProblem:
    file_position: int
    slot: int | None  # the entry, when the problem is about one entry
    problem: Problem


def read_offset_index(buf: bytes) -> tuple[list[OffsetIndexEntry], list[IndexProblem]]:
    """Entries in use, and problems with the file's shape (partial or zero trailing entries)."""
    raw, problems = _read_entries(buf, _INDEX_ENTRY)
    return [OffsetIndexEntry(i, rel, pos) for i, (rel, pos) in enumerate(raw)], problems


def read_time_index(buf: bytes) -> tuple[list[TimeIndexEntry], list[IndexProblem]]:
    raw, problems = _read_entries(buf, _TIME_INDEX_ENTRY)
    return [TimeIndexEntry(i, ts, rel) for i, (ts, rel) in enumerate(raw)], problems


def _read_entries(
    buf: bytes, entry: struct.Struct
) -> tuple[list[tuple[int, int]], list[IndexProblem]]:
    whole = len(buf) - len(buf) % entry.size
    raw = [entry.unpack_from(buf, p) for p in range(0, whole, entry.size)]
    problems: list[IndexProblem] = []
    # Kafka preallocates and reads an all-zero entry after the first as "unused"; pulllog
    # trims its index files, so zeros at the end mean it did not (a crash, or damage).
    used = len(raw)
    while used > 1 and raw[used - 1] == (0, 0):
        used -= 1
    if used == 1 and len(raw) > 1 and raw[0] == (0, 0):
        used = 0  # all zeros: a lone (0, 0) first entry is plausible, a file of them is not
    if used < len(raw):
        unused = len(raw) - used
        problems.append(
            IndexProblem(
                used * entry.size,
                None,
                Problem(
                    "unused entries",
                    f"the last {unused} entries are all zeros (unused space that was not "
                    "trimmed, or damage)",
                ),
            )
        )
    if whole < len(buf):
        problems.append(
            IndexProblem(
                whole,
                None,
                Problem(
                    "partial entry",
                    f"{len(buf) - whole} trailing bytes are not a whole {entry.size}-byte entry",
                ),
            )
        )
    return raw[:used], problems


@dataclass(slots=True)
class LogMap:
    """Where each sound batch of a .log starts and which offsets it holds, for index checks."""

    positions: array = field(default_factory=lambda: array("q"))
    base_offsets: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    # Largest timestamp in the segment up to and including each batch.
    max_timestamps: array = field(default_factory=lambda: array("q"))
    damaged: dict[int, str] = field(default_factory=dict)  # position -> kind of problem
    size: int = 0
    stopped_at: int | None = None  # where the walk met damage it could not step over

    @classmethod
    def of(cls, buf: bytes | bytearray | memoryview, segment_base_offset: int | None) -> LogMap:
        log_map = cls(size=len(buf))
        running_max = -1
        for item in walk_log(buf, segment_base_offset=segment_base_offset):
            if isinstance(item, Damage):
                log_map.damaged[item.position] = item.problem.kind
                if not item.resumes:
                    log_map.stopped_at = item.position
            elif item.problem is not None:
                log_map.damaged[item.position] = item.problem.kind
            else:
                h = item.header
                running_max = max(running_max, h.max_timestamp)
                log_map.positions.append(item.position)
                log_map.base_offsets.append(h.base_offset)
                log_map.last_offsets.append(h.last_offset)
                log_map.max_timestamps.append(running_max)
        return log_map

    def batch_at(self, position: int) -> int | None:
        i = bisect_left(self.positions, position)
        return i if i < len(self.positions) and self.positions[i] == position else None

    def batch_holding(self, offset: int) -> int | None:
        i = bisect_left(self.last_offsets, offset)
        if i < len(self.last_offsets) and self.base_offsets[i] <= offset:
            return i
        return None

    @property
    def offsets(self) -> str:
        if not self.positions:
            return "no valid batches"
        return f"offsets {self.base_offsets[0]}..{self.last_offsets[-1]}"


def check_offset_index(
    entries: Iterable[OffsetIndexEntry], base_offset: int, log: LogMap | None, log_name: str
) -> dict[int, Problem]:
    """Problems by entry slot: order, and (given the .log) that each entry finds its batch."""
    problems: dict[int, Problem] = {}
    previous: OffsetIndexEntry | None = None
    for e in entries:
        offset = base_offset + e.relative_offset
        if e.relative_offset < 0 or e.position < 0:
            problems[e.slot] = Problem("negative", "relative offset and position must be >= 0")
        elif previous is not None and (
            e.relative_offset <= previous.relative_offset or e.position <= previous.position
        ):
            problems[e.slot] = Problem(
                "out of order",
                f"offset {offset} / position {e.position} do not increase past the previous "
                f"entry's {base_offset + previous.relative_offset} / {previous.position}",
            )
        elif log is not None:
            problem = _check_index_position(log, offset, e.position, log_name)
            if problem is not None:
                problems[e.slot] = problem
        previous = e
    return problems


def _check_index_position(
    log: LogMap, offset: int, position: int, log_name: str
) -> Problem | None:
    i = log.batch_at(position)
    if i is None:
        if position in log.damaged:
            where = f"damaged in {log_name} ({log.damaged[position]})"
        elif position >= log.size:
            where = f"beyond the end of {log_name} ({log.size} bytes)"
        elif log.stopped_at is not None and position > log.stopped_at:
            where = f"past the damage at position {log.stopped_at} of {log_name}"
        else:
            where = f"not the start of a batch in {log_name}"
        return Problem("not a batch start", f"position {position} is {where}")
    if not log.base_offsets[i] <= offset <= log.last_offsets[i]:
        return Problem(
            "offset mismatch",
            f"index offset {offset}, but the batch at position {position} holds offsets "
            f"{log.base_offsets[i]}..{log.last_offsets[i]}",
        )
    return None


def check_time_index(
    entries: Iterable[TimeIndexEntry], base_offset: int, log: LogMap | None, log_name: str
) -> dict[int, Problem]:
    """Problems by entry slot: order, and (given the .log) that offsets and timestamps agree."""
    problems: dict[int, Problem] = {}
    previous: TimeIndexEntry | None = None
    for e in entries:
        offset = base_offset + e.relative_offset
        if e.relative_offset < 0:
            problems[e.slot] = Problem("negative", "relative offset must be >= 0")
        elif previous is not None and e.timestamp < previous.timestamp:
            problems[e.slot] = Problem(
                "out of order",
                f"timestamp {e.timestamp} is before the previous entry's {previous.timestamp}",
            )
        elif previous is not None and e.relative_offset < previous.relative_offset:
            problems[e.slot] = Problem(
                "out of order",
                f"offset {offset} is before the previous entry's "
                f"{base_offset + previous.relative_offset}",
            )
        elif log is not None:
            i = log.batch_holding(offset)
            if i is None:
                problems[e.slot] = Problem(
                    "offset not in log",
                    f"no valid batch in {log_name} holds offset {offset} ({log.offsets})",
                )
            elif log.max_timestamps[i] != e.timestamp:
                problems[e.slot] = Problem(
                    "timestamp mismatch",
                    f"index timestamp {e.timestamp}, but the largest timestamp in {log_name} "
                    f"up to offset {offset} is {log.max_timestamps[i]}",
                )
        previous = e
    return problems
