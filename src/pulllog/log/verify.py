"""Walk a segment's files without trusting them: the one set of checks that recovery, index
loading and ``pulllog inspect segment`` share.

- ``LogSegment.recover`` walks the whole .log with :func:`walk_log` and truncates it at the
  first batch with a problem or the first damage: everything before is sound.
- ``LogSegment.load`` (a clean open) walks the .log from the last offset index entry, and
  ``OffsetIndex.load`` / ``TimeIndex.load`` refuse an index for which
  :func:`index_entries`, :func:`offset_index_problems` or :func:`time_index_problems`
  report anything; the segment is then recovered.
- ``pulllog inspect segment`` shows every batch, entry and problem these find, and with
  ``--verify`` only the verdict (the presentation is all in ``pulllog.cli.inspect``).

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
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import le, lt

from pulllog.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    RecordBatch,
    TimestampType,
    compute_crc,
    read_header,
)
from pulllog.records.compression import Compression
from pulllog.records.control import ControlRecord, read_control_record

__all__ = [
    "MAX_CODEC",
    "BatchView",
    "Damage",
    "Decoded",
    "IndexColumns",
    "IndexProblem",
    "LogMap",
    "Problem",
    "decode_batch",
    "index_entries",
    "offset_index_problems",
    "time_index_problems",
    "walk_log",
]

_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # a batchLength must cover the header
_MAGIC_POSITION = 16
# Smallest legacy message after the 12-byte offset+size prefix: crc, magic, attributes,
# (v1: timestamp), key length, value length.
_LEGACY_MIN_MESSAGE = {0: 14, 1: 22}
_OFFSET_AND_LENGTH = struct.Struct(">qi")
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
    buf: bytes | bytearray | memoryview,
    *,
    segment_base_offset: int | None = None,
    previous_last_offset: int | None = None,
) -> Iterator[BatchView | Damage]:
    """Yield every batch and every piece of damage in a .log, in file order. Never raises.

    ``segment_base_offset`` (from the file name) and ``previous_last_offset`` (the last
    offset before the first batch, e.g. the previous segment's) bound the first batch's
    base offset; after that each batch must start past the last sound one."""
    end = len(buf)
    pos = 0
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
        control = read_control_record(batch) if h.is_control else None
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


# ---------------------------------------------------------------------------- index files


@dataclass(frozen=True, slots=True)
class IndexProblem:
    file_position: int
    slot: int | None  # the entry, when the problem is about one entry
    problem: Problem


IndexColumns = tuple[Sequence[int], Sequence[int]]
"""An index's entries in use as two columns, in file order: (relative offsets, positions) of
an offset index, (timestamps, relative offsets) of a time index. Columns, because loading
the index of a full segment (~250k entries) is on the path of every clean start, and a
column is checked and copied in C."""


def index_entries(buf: bytes, entry: struct.Struct) -> tuple[IndexColumns, list[IndexProblem]]:
    """The entries in use, and problems with the file's shape (partial or zero trailing entries).

    ``entry`` is the index's entry format (pulllog.log.index: ``OFFSET_ENTRY``, ``TIME_ENTRY``)."""
    count = len(buf) // entry.size
    whole = count * entry.size
    flat: Sequence[int]
    if entry.format == ">ii":  # the offset index: an int32 array, byte-swapped in C
        flat = array("i")
        flat.frombytes(memoryview(buf)[:whole])
        if sys.byteorder == "little":
            flat.byteswap()
    else:
        flat = struct.unpack(entry.format[0] + entry.format[1:] * count, memoryview(buf)[:whole])
    first, second = flat[0::2], flat[1::2]
    problems: list[IndexProblem] = []
    # Kafka preallocates and reads an all-zero entry after the first as "unused"; pulllog
    # trims its index files, so zeros at the end mean it did not (a crash, or damage).
    used = count
    while used > 1 and first[used - 1] == 0 and second[used - 1] == 0:
        used -= 1
    if used == 1 and count > 1 and first[0] == 0 and second[0] == 0:
        used = 0  # all zeros: a lone (0, 0) first entry is plausible, a file of them is not
    if used < count:
        problems.append(
            IndexProblem(
                used * entry.size,
                None,
                Problem(
                    "unused entries",
                    f"the last {count - used} entries are all zeros (unused space that was not "
                    "trimmed, or damage)",
                ),
            )
        )
        first, second = first[:used], second[:used]
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
    return (first, second), problems


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


def offset_index_problems(
    entries: IndexColumns,
    base_offset: int,
    log: LogMap | None = None,
    log_name: str = "the .log",
    *,
    log_size: int | None = None,
) -> Iterator[tuple[int, Problem]]:
    """(slot, problem) for each bad (relative offset, position) entry, in slot order: order,
    and that each entry finds its batch (given the walked .log), or at least lies inside it
    (given only its size)."""
    if log is None and _offset_entries_sound(entries, log_size):
        return
    previous_offset = previous_position = -1  # the first entry has no previous to follow
    first = True
    for slot, (relative_offset, position) in enumerate(zip(*entries)):
        if relative_offset < 0 or position < 0:
            yield slot, Problem("negative", "relative offset and position must be >= 0")
        elif not first and (relative_offset <= previous_offset or position <= previous_position):
            yield slot, Problem(
                "out of order",
                f"offset {base_offset + relative_offset} / position {position} do not increase "
                f"past the previous entry's {base_offset + previous_offset} / {previous_position}",
            )
        elif log is not None:
            problem = _check_index_position(log, base_offset + relative_offset, position, log_name)
            if problem is not None:
                yield slot, problem
        elif log_size is not None and position >= log_size:
            yield slot, Problem(
                "not a batch start", f"position {position} is beyond the end of {log_name} ({log_size} bytes)"
            )
        previous_offset, previous_position, first = relative_offset, position, False


def _offset_entries_sound(entries: IndexColumns, log_size: int | None) -> bool:
    """The rules of the loop in :func:`offset_index_problems` without a .log, checked a column
    at a time in C (see IndexColumns); the loop then says what is wrong, when something is."""
    offsets, positions = entries
    if not offsets:
        return True
    return (
        min(offsets) >= 0
        and positions[0] >= 0
        and all(map(lt, offsets, offsets[1:]))
        and all(map(lt, positions, positions[1:]))
        and (log_size is None or positions[-1] < log_size)
    )


def _time_entries_sound(entries: IndexColumns, base_offset: int, next_offset: int | None) -> bool:
    """:func:`time_index_problems`' rules without a .log, a column at a time (see above)."""
    timestamps, offsets = entries
    if not offsets:
        return True
    return (
        min(offsets) >= 0
        and all(map(le, timestamps, timestamps[1:]))
        and all(map(le, offsets, offsets[1:]))
        and (next_offset is None or base_offset + offsets[-1] < next_offset)
    )


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


def time_index_problems(
    entries: IndexColumns,
    base_offset: int,
    log: LogMap | None = None,
    log_name: str = "the .log",
    *,
    next_offset: int | None = None,
) -> Iterator[tuple[int, Problem]]:
    """(slot, problem) for each bad (timestamp, relative offset) entry, in slot order: order,
    and that offsets and timestamps agree with the walked .log (given it), or at least that
    the offsets are below the log's next offset (given only that)."""
    if log is None and _time_entries_sound(entries, base_offset, next_offset):
        return
    previous_timestamp = previous_offset = -1
    first = True
    for slot, (timestamp, relative_offset) in enumerate(zip(*entries)):
        if relative_offset < 0:
            yield slot, Problem("negative", "relative offset must be >= 0")
        elif not first and timestamp < previous_timestamp:
            yield slot, Problem(
                "out of order",
                f"timestamp {timestamp} is before the previous entry's {previous_timestamp}",
            )
        elif not first and relative_offset < previous_offset:
            yield slot, Problem(
                "out of order",
                f"offset {base_offset + relative_offset} is before the previous entry's "
                f"{base_offset + previous_offset}",
            )
        elif log is not None:
            offset = base_offset + relative_offset
            i = log.batch_holding(offset)
            if i is None:
                yield slot, Problem(
                    "offset not in log",
                    f"no valid batch in {log_name} holds offset {offset} ({log.offsets})",
                )
            elif log.max_timestamps[i] != timestamp:
                yield slot, Problem(
                    "timestamp mismatch",
                    f"index timestamp {timestamp}, but the largest timestamp in {log_name} "
                    f"up to offset {offset} is {log.max_timestamps[i]}",
                )
        elif next_offset is not None and base_offset + relative_offset >= next_offset:
            yield slot, Problem(
                "offset not in log",
                f"offset {base_offset + relative_offset} is past the last offset {next_offset - 1} of {log_name}",
            )
        previous_timestamp, previous_offset, first = timestamp, relative_offset, False
