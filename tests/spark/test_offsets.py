"""Offset specs as users write them, and the fixed range boundaries the export names files by."""

from __future__ import annotations

import pytest

from pulllog.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OffsetSpecError,
    parse_offset_spec,
    split,
)


@pytest.mark.parametrize("text, topic, partition, expected", [
    ("42", "t", 3, 42),
    ("0:10,1:20", "t", 1, 20),
    ("0:10,1:20", "t", 2, LATEST),  # not named: the caller's default
    ('{"0": 10, "1": -2}', "t", 1, EARLIEST),
    ('{"orders": {"0": 7}}', "orders", 0, 7),
    ('{"orders": {"0": 7}}', "refunds", 0, LATEST),
])
def test_explicit_offsets_apply_per_partition_with_a_default(text: str, topic: str, partition: int,
                                                             expected: int) -> None:
    spec = parse_offset_spec(text)
    assert spec is not None and spec.kind == "offsets"
    assert spec.offset_for(topic, partition, LATEST) == expected


def test_an_iso_datetime_without_a_zone_is_utc() -> None:
    assert parse_offset_spec("2024-05-01T12:00:00").timestamp_ms == 1714564800000
    assert parse_offset_spec("2024-05-01T14:00:00+02:00").timestamp_ms == 1714564800000
    assert parse_offset_spec("2024-05-01T12:00:00Z").timestamp_ms == 1714564800000


def test_a_spec_that_does_not_parse_says_what_would() -> None:
    with pytest.raises(OffsetSpecError, match=r"--from 'yesterday': expected earliest, latest, an offset"):
        parse_offset_spec("yesterday", what="--from")


def test_split_cuts_on_fixed_boundaries_from_the_start_and_drops_empty_ranges() -> None:
    ranges = [OffsetRange("t", 0, 100, 350), OffsetRange("t", 1, 5, 5)]
    assert split(ranges, 100) == [OffsetRange("t", 0, 100, 200), OffsetRange("t", 0, 200, 300),
                                  OffsetRange("t", 0, 300, 350)]
