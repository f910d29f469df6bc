"""Offset specs (where a read starts and ends) and offset ranges (what one task reads).

A spec is what a user writes; it becomes concrete offsets once the broker's log start offset
and high watermark are known (``pulllog.spark.wire.resolve``). Accepted forms, for the data
source's ``startingOffsets`` / ``endingOffsets`` and the export's ``--from`` / ``--to``:

    earliest                      the log start offset of every partition
    latest                        the high watermark of every partition
    {"0": 10, "1": -2}            per partition: an offset, -2 earliest, -1 latest; partitions
                                  not named take the default (earliest to start, latest to end)
    {"orders": {"0": 10}}         the same, per topic (Spark's Kafka source writes it this way)
    0:10,1:20                     the per-partition map, shell friendly
    10                            offset 10 of every partition
    2024-05-01T12:00:00Z          the first offset whose timestamp is at or after this time
                                  (ISO 8601; no zone means UTC); the high watermark if none is

A range is ``[start, end)`` of one partition, never empty. ``split`` cuts a partition's range
into pieces of at most ``max_offsets`` offsets, on fixed boundaries (multiples of
``max_offsets`` from the range's start), so the same plan always yields the same pieces:
the export names its files by them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["EARLIEST", "LATEST", "OffsetRange", "OffsetSpec", "OffsetSpecError", "parse_offset_spec", "split"]

EARLIEST = -2
LATEST = -1


class OffsetSpecError(ValueError):
    """An offset spec that does not parse, or names an offset the partition does not have."""


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``, ``latest``, explicit offsets (with a default), or a timestamp in ms."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp"
    offsets: Mapping[tuple[str | None, int | None], int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    text: str = ""

    def offset_for(self, topic: str, partition: int, default: int) -> int:
        """The explicit offset (or EARLIEST / LATEST) for one partition of an ``offsets`` spec."""
        for key in ((topic, partition), (None, partition), (topic, None), (None, None)):
            if key in self.offsets:
                return self.offsets[key]
        return default

    def __str__(self) -> str:
        return self.text or self.kind


def parse_offset_spec(text: str | int | None, *, what: str = "offset spec") -> OffsetSpec | None:
    """Parse one of the forms in the module docstring; None stays None (the caller's default)."""
    if text is None:
        return None
    raw = str(text).strip()
    low = raw.lower()
    if low == "earliest":
        return OffsetSpec("earliest", text=raw)
    if low == "latest":
        return OffsetSpec("latest", text=raw)
    if re.fullmatch(r"-?\d+", raw):
        return OffsetSpec("offsets", {(None, None): _offset(int(raw), what, raw)}, text=raw)
    if raw.startswith("{"):
        return OffsetSpec("offsets", _parse_json(raw, what), text=raw)
    if re.fullmatch(r"\d+:-?\d+(,\s*\d+:-?\d+)*", raw):
        pairs = (item.split(":") for item in raw.split(","))
        return OffsetSpec("offsets", {(None, int(p)): _offset(int(o), what, raw) for p, o in pairs}, text=raw)
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise OffsetSpecError(
            f"{what} {raw!r}: expected earliest, latest, an offset, PARTITION:OFFSET[,...], "
            'a JSON map like {"0": 42}, or an ISO datetime like 2024-05-01T12:00:00Z') from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return OffsetSpec("timestamp", timestamp_ms=int(when.timestamp() * 1000), text=raw)


def _offset(value: int, what: str, raw: str) -> int:
    if value < EARLIEST:
        raise OffsetSpecError(f"{what} {raw!r}: offset {value} is negative (use -2 for earliest, -1 for latest)")
    return value


def _parse_json(raw: str, what: str) -> dict[tuple[str | None, int | None], int]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OffsetSpecError(f"{what} {raw!r} is not valid JSON: {exc.msg}") from None
    out: dict[tuple[str | None, int | None], int] = {}

    def partition_map(topic: str | None, m: Mapping[str, object]) -> None:
        for p, o in m.items():
            if not (isinstance(p, str) and p.lstrip("-").isdigit()) or not isinstance(o, int):
                raise OffsetSpecError(f'{what} {raw!r}: expected {{"PARTITION": OFFSET, ...}}, got {p!r}: {o!r}')
            out[(topic, int(p))] = _offset(o, what, raw)

    if not isinstance(doc, dict):
        raise OffsetSpecError(f"{what} {raw!r}: expected a JSON object")
    if all(isinstance(v, dict) for v in doc.values()) and doc:
        for topic, m in doc.items():
            partition_map(topic, m)
    else:
        partition_map(None, doc)
    return out


def split(ranges: Iterable[OffsetRange], max_offsets: int | None) -> list[OffsetRange]:
    """Cut each range into pieces of at most ``max_offsets`` offsets; drop empty ranges."""
    if max_offsets is not None and max_offsets < 1:
        raise OffsetSpecError(f"the maximum offsets per range must be at least 1, not {max_offsets}")
    out: list[OffsetRange] = []
    for r in ranges:
        if r.end <= r.start:
            continue
        if max_offsets is None:
            out.append(r)
            continue
        for lo in range(r.start, r.end, max_offsets):
            out.append(OffsetRange(r.topic, r.partition, lo, min(lo + max_offsets, r.end)))
    return out
