"""`pulllog inspect segment`: what it shows for sound segment files and how it reports damage.

Segment files are built with our codec (and kafka-python's, for magic 0/1 message sets and as
an independent v2 builder), written into a partition directory, then damaged by hand.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulllog.cli.main import main
from pulllog.records.compression import Compression
from pulllog.records.batch import build_batch, compute_crc
from pulllog.records.control import ControlType, build_control_batch

T0 = 1714564800000  # 2024-05-01T12:00:00.000Z
SEGMENT = "00000000000000000000"


# ---------------------------------------------------------------------------- helpers


def inspect(*args: str | Path, columns: int | None = None) -> Result:
    """Run the command; output is not a terminal, so tables are as wide as they need."""
    env = {"COLUMNS": None if columns is None else str(columns)}
    return CliRunner(env=env).invoke(main, ["inspect", "segment", *map(str, args)])


def json_lines(result: Result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def of_type(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["type"] == kind]


def write(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return path


def three_batches() -> list[bytes]:
    """Offsets 0..1, 2..4 (gzip), 5..5: a small, sound segment."""
    return [
        build_batch([(b"k0", b"v0"), (b"k1", b"v1", T0 + 5)], base_offset=0, timestamp=T0),
        build_batch(
            [(b"k", b"v" * 50)] * 3,
            base_offset=2,
            timestamp=T0 + 1000,
            compression=Compression.GZIP,
        ),
        build_batch([(None, b"last")], base_offset=5, timestamp=T0 + 2000),
    ]


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    return tmp_path / "orders-0"


@pytest.fixture
def log(partition: Path) -> Path:
    return write(partition, f"{SEGMENT}.log", b"".join(three_batches()))


def positions(batches: list[bytes]) -> list[int]:
    out, pos = [], 0
    for b in batches:
        out.append(pos)
        pos += len(b)
    return out


def recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return batch


def legacy_message_set(magic: int, base_offset: int = 0) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(base_offset, timestamp=T0 if magic else None, key=b"k", value=b"hello")
    return bytes(builder.build())


def verify_error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    return lines[0]


# ---------------------------------------------------------------------------- sound .log


def test_table_lists_each_batch_with_offsets_size_crc_and_times(log: Path) -> None:
    result = inspect(log)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for offsets in ("0..1", "2..4", "5..5"):
        assert offsets in out
    assert "2024-05-01T12:00:00.000Z" in out  # first timestamp, human readable
    assert "2024-05-01T12:00:00.005Z" in out  # max timestamp of the first batch
    assert str(T0 + 5) in out
    assert "gzip" in out and "CreateTime" in out
    assert " ok" in out and "CRC mismatch" not in out
    assert "Summary: 3 batches, 6 records" in out
    assert "offsets 0..5" in out


def test_table_shows_producer_and_transactional_flag(partition: Path) -> None:
    batch = build_batch(
        [(b"k", b"v")],
        timestamp=T0,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=17,
        transactional=True,
    )
    result = inspect(write(partition, f"{SEGMENT}.log", batch))
    assert "4242 / 3 / 17" in result.stdout
    assert "transactional" in result.stdout


@pytest.mark.parametrize("marker", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batch_shows_its_marker_type(partition: Path, marker: ControlType) -> None:
    data = build_batch([(b"k", b"v")], timestamp=T0, producer_id=9, producer_epoch=0,
                       transactional=True)
    data += build_control_batch(9, 0, marker == ControlType.COMMIT, 0, T0, base_offset=1)
    path = write(partition, f"{SEGMENT}.log", data)
    assert f"control {marker.name}" in inspect(path).stdout
    batches = of_type(json_lines(inspect(path, "--json")), "batch")
    assert [b["control_type"] for b in batches] == [None, marker.name]


def test_records_flag_lists_offsets_keys_values_and_headers(partition: Path) -> None:
    batch = build_batch(
        [(b"user-1", b"hello", T0, [("trace", b"abc"), ("empty", None)]), (None, None, T0 + 1)],
        base_offset=0,
        timestamp=T0,
    )
    result = inspect(write(partition, f"{SEGMENT}.log", batch), "--records")
    assert result.exit_code == 0
    out = result.stdout
    assert "'user-1'" in out and "'hello'" in out
    assert "trace='abc'" in out and "empty=null" in out
    assert "null" in out  # the second record's key and value
    assert "2024-05-01T12:00:00.001Z" in out


def test_records_flag_shortens_long_values_and_escapes_binary(partition: Path) -> None:
    batch = build_batch([(b"\x00\xff", b"x" * 500)], timestamp=T0)
    out = inspect(write(partition, f"{SEGMENT}.log", batch), "--records").stdout
    assert "b'\\x00\\xff'" in out
    assert "x" * 500 not in out
    assert "… (500 bytes)" in out


def test_a_narrow_terminal_gets_one_line_per_batch_instead_of_cut_cells(log: Path) -> None:
    out = inspect(log, columns=80).stdout
    assert "Position: 0  Offsets: 0..1" in out
    assert "…" not in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_json_prints_one_parseable_object_per_line(log: Path) -> None:
    result = inspect(log, "--json", "--records")
    assert result.exit_code == 0
    objs = json_lines(result)
    assert objs[0]["type"] == "segment" and objs[0]["base_offset"] == 0
    assert objs[-1]["type"] == "summary"
    assert len(of_type(objs, "batch")) == 3
    assert [r["offset"] for r in of_type(objs, "record")] == [0, 1, 2, 3, 4, 5]


def test_json_batch_carries_every_header_field(log: Path) -> None:
    first, gzip_batch, _ = of_type(json_lines(inspect(log, "--json")), "batch")
    assert first == first | {
        "position": 0,
        "base_offset": 0,
        "last_offset": 1,
        "records_count": 2,
        "crc_valid": True,
        "compression": "none",
        "timestamp_type": "CreateTime",
        "first_timestamp": T0,
        "first_time": "2024-05-01T12:00:00.000Z",
        "max_timestamp": T0 + 5,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "transactional": False,
        "control": False,
        "valid": True,
        "problem": None,
    }
    assert first["crc_stored"] == first["crc_computed"]
    assert gzip_batch["compression"] == "gzip"
    assert gzip_batch["position"] == first["size"]


def test_json_bytes_are_text_or_base64_as_consume_writes_them(partition: Path) -> None:
    batch = build_batch([(b"caf\xc3\xa9", b"\xff\x00", T0, [("h", b"\x80")])], timestamp=T0)
    (record,) = of_type(
        json_lines(inspect(write(partition, f"{SEGMENT}.log", batch), "--json", "--records")),
        "record",
    )
    assert record["key"] == "café"
    assert record["value"] == {"base64": "/wA="}
    assert record["headers"] == [{"key": "h", "value": {"base64": "gA=="}}]


def test_log_append_time_records_carry_the_batch_timestamp(partition: Path) -> None:
    from pulllog.records.batch import TimestampType

    batch = build_batch(
        [(b"k", b"v", T0)], timestamp_type=TimestampType.LOG_APPEND_TIME, timestamp=T0
    )
    objs = json_lines(inspect(write(partition, f"{SEGMENT}.log", batch), "--json", "--records"))
    assert of_type(objs, "batch")[0]["timestamp_type"] == "LogAppendTime"
    assert of_type(objs, "record")[0]["timestamp"] == T0


def test_limit_shows_the_first_batches_but_the_summary_counts_all(log: Path) -> None:
    result = inspect(log, "--limit", "1")
    assert "0..1" in result.stdout and "2..4" not in result.stdout
    assert "2 more batches not shown" in result.stdout
    assert "Summary: 3 batches" in result.stdout
    objs = json_lines(inspect(log, "--json", "--limit", "1"))
    assert len(of_type(objs, "batch")) == 1
    assert objs[-1]["batches"] == 3


def test_empty_log_is_a_valid_segment(partition: Path) -> None:
    result = inspect(write(partition, f"{SEGMENT}.log", b""), "--verify")
    assert result.exit_code == 0
    assert "0 batches" in result.stdout


def test_batches_from_an_independent_builder_are_valid(partition: Path) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )
    builder.append(0, timestamp=T0, key=b"k", value=b"v", headers=[("h", b"x")])
    result = inspect(write(partition, f"{SEGMENT}.log", bytes(builder.build())), "--verify")
    assert result.exit_code == 0, result.output


def test_verify_prints_a_summary_and_exits_zero_when_all_is_well(log: Path) -> None:
    result = inspect(log, "--verify")
    assert result.exit_code == 0
    assert result.stdout.strip() == (
        f"ok: {SEGMENT}.log: 3 batches, 6 records, {log.stat().st_size} bytes, "
        "offsets 0..5; all valid"
    )
    assert result.stderr == ""


def test_verify_json_prints_only_the_summary_object(log: Path) -> None:
    (summary,) = json_lines(inspect(log, "--verify", "--json"))
    assert summary["type"] == "summary"
    assert summary["valid"] is True and summary["records_checked"] is True


# ---------------------------------------------------------------------------- damaged .log


def test_verify_reports_a_torn_tail_at_the_last_batch(partition: Path) -> None:
    batches = three_batches()
    data = b"".join(batches)[:-7]
    line = verify_error(inspect(write(partition, f"{SEGMENT}.log", data), "--verify"))
    assert line.startswith(
        f"error: {SEGMENT}.log: invalid batch at position {positions(batches)[2]}: "
        "truncated batch"
    )


def test_a_torn_tail_still_shows_the_batches_before_it(partition: Path) -> None:
    data = b"".join(three_batches())[:-7]
    result = inspect(write(partition, f"{SEGMENT}.log", data))
    assert result.exit_code == 0
    assert "0..1" in result.stdout and "2..4" in result.stdout
    assert "truncated batch" in result.stdout


def test_verify_reports_a_flipped_byte_as_a_crc_mismatch(partition: Path) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    data[positions(batches)[1] + 70] ^= 0x01
    line = verify_error(inspect(write(partition, f"{SEGMENT}.log", bytes(data)), "--verify"))
    assert f"invalid batch at position {positions(batches)[1]}: CRC mismatch" in line
    assert "stored 0x" in line and "computed 0x" in line


def test_table_shows_stored_and_computed_crc_of_a_damaged_batch(partition: Path) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    data[positions(batches)[1] + 70] ^= 0x01
    result = inspect(write(partition, f"{SEGMENT}.log", bytes(data)))
    assert result.exit_code == 0
    (stored,) = struct.unpack_from(">I", data, positions(batches)[1] + 17)
    assert f"{stored:#010x}" in result.stdout
    assert "computed 0x" in result.stdout
    assert f"position {positions(batches)[1]}: CRC mismatch" in result.stdout  # problem list
    assert f"first bad position {positions(batches)[1]}" in result.stdout  # summary


def test_the_walk_continues_past_a_crc_mismatch_whose_length_is_plausible(
    partition: Path,
) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    data[positions(batches)[1] + 70] ^= 0x01
    batches_json = of_type(
        json_lines(inspect(write(partition, f"{SEGMENT}.log", bytes(data)), "--json")), "batch"
    )
    assert [b["crc_valid"] for b in batches_json] == [True, False, True]
    assert batches_json[1]["problem"]["kind"] == "CRC mismatch"
    assert batches_json[1]["crc_stored"] != batches_json[1]["crc_computed"]


def test_the_walk_stops_when_a_damaged_length_leads_nowhere(partition: Path) -> None:
    batches = three_batches()
    second = positions(batches)[1]
    data = bytearray(b"".join(batches))
    (length,) = struct.unpack_from(">i", data, second + 8)
    struct.pack_into(">i", data, second + 8, length + 10)  # now ends inside the third batch
    objs = json_lines(inspect(write(partition, f"{SEGMENT}.log", bytes(data)), "--json"))
    assert [b["position"] for b in of_type(objs, "batch")] == [0, second]
    (lost,) = of_type(objs, "damage")
    assert lost["problem"]["kind"] == "no batch here"
    assert lost["position"] == second + 12 + length + 10
    assert objs[-1]["first_bad_position"] == second


def test_verify_reports_long_junk_appended_after_the_last_batch(log: Path) -> None:
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + b"this is not a record batch at all, sorry")
    line = verify_error(inspect(log, "--verify"))
    assert f"invalid batch at position {size}: unknown magic" in line


def test_verify_reports_a_few_junk_bytes_as_a_torn_tail(log: Path) -> None:
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + b"junk")
    line = verify_error(inspect(log, "--verify"))
    assert f"invalid batch at position {size}: torn tail: 4 bytes" in line


def test_verify_reports_zero_bytes_at_the_end(log: Path) -> None:
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + bytes(4096))
    line = verify_error(inspect(log, "--verify"))
    assert f"invalid batch at position {size}: zero bytes: the last 4096 bytes" in line


def test_verify_reports_a_batch_length_smaller_than_a_header(partition: Path) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    struct.pack_into(">i", data, positions(batches)[2] + 8, 20)
    line = verify_error(inspect(write(partition, f"{SEGMENT}.log", bytes(data)), "--verify"))
    assert f"invalid batch at position {positions(batches)[2]}: bad batchLength: " in line
    assert "batchLength 20" in line


def test_verify_reports_a_huge_batch_length(partition: Path) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    struct.pack_into(">i", data, positions(batches)[1] + 8, 0x7FFFFFFF)
    path = write(partition, f"{SEGMENT}.log", bytes(data))
    line = verify_error(inspect(path, "--verify"))
    assert f"invalid batch at position {positions(batches)[1]}: truncated batch" in line
    assert inspect(path).exit_code == 0  # inspecting a damaged file is not an error


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_set_is_shown_as_unsupported_and_stepped_over(
    partition: Path, magic: int
) -> None:
    legacy = legacy_message_set(magic, base_offset=0)
    data = legacy + build_batch([(b"k", b"v")], base_offset=1, timestamp=T0)
    path = write(partition, f"{SEGMENT}.log", data)
    objs = json_lines(inspect(path, "--json"))
    (damage,) = of_type(objs, "damage")
    assert damage["problem"]["kind"] == f"magic {magic} message set (unsupported)"
    assert (damage["position"], damage["offset"], damage["size"]) == (0, 0, len(legacy))
    assert [b["position"] for b in of_type(objs, "batch")] == [len(legacy)]
    assert f"magic {magic} message set (unsupported)" in inspect(path).stdout


def test_verify_rejects_a_legacy_message_set_after_good_batches(log: Path) -> None:
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + legacy_message_set(1, base_offset=6))
    line = verify_error(inspect(log, "--verify"))
    assert f"invalid batch at position {size}: magic 1 message set (unsupported): offset 6" in line


def test_a_legacy_message_set_with_an_implausible_length_stops_the_walk(log: Path) -> None:
    size = log.stat().st_size
    legacy = bytearray(legacy_message_set(0, base_offset=6))
    struct.pack_into(">i", legacy, 8, 1_000_000)
    log.write_bytes(log.read_bytes() + legacy)
    (damage,) = of_type(json_lines(inspect(log, "--json")), "damage")
    assert damage["position"] == size and damage["resumes"] is False
    assert "does not fit" in damage["problem"]["message"]


def test_verify_decodes_records_and_reports_a_bad_record_count(partition: Path) -> None:
    batches = three_batches()
    third = bytearray(batches[2])
    struct.pack_into(">i", third, 57, 2)  # recordsCount says 2, the batch holds 1
    data = batches[0] + batches[1] + bytes(recrc(third))
    path = write(partition, f"{SEGMENT}.log", data)
    assert inspect(path).exit_code == 0  # the CRC is valid: only decoding finds this
    line = verify_error(inspect(path, "--verify"))
    assert f"invalid batch at position {positions(batches)[2]}: bad records" in line


def test_verify_reports_a_compressed_payload_that_does_not_decompress(partition: Path) -> None:
    batches = three_batches()
    second = bytearray(batches[1])
    second[70:80] = b"\xaa" * 10  # inside the gzip stream
    data = batches[0] + bytes(recrc(second)) + batches[2]
    line = verify_error(inspect(write(partition, f"{SEGMENT}.log", data), "--verify"))
    assert f"invalid batch at position {positions(batches)[1]}: bad records: gzip" in line


def test_verify_reports_an_unknown_compression_codec(partition: Path) -> None:
    batch = bytearray(build_batch([(b"k", b"v")], timestamp=T0))
    struct.pack_into(">h", batch, 21, 6)
    path = write(partition, f"{SEGMENT}.log", bytes(recrc(batch)))
    line = verify_error(inspect(path, "--verify"))
    assert "invalid batch at position 0: bad header: unknown compression codec id 6" in line


def test_verify_reports_offsets_that_go_backwards(partition: Path) -> None:
    first = build_batch([(b"k", b"v")] * 3, base_offset=0, timestamp=T0)
    again = build_batch([(b"k", b"v")], base_offset=2, timestamp=T0)
    line = verify_error(inspect(write(partition, f"{SEGMENT}.log", first + again), "--verify"))
    assert f"invalid batch at position {len(first)}: offset order: base offset 2" in line


def test_verify_reports_a_batch_below_the_segment_base_offset(partition: Path) -> None:
    batch = build_batch([(b"k", b"v")], base_offset=5, timestamp=T0)
    line = verify_error(inspect(write(partition, "00000000000000000100.log", batch), "--verify"))
    assert "position 0: offset order: base offset 5 is below the segment's base offset 100" in line


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(min_value=0, max_value=400),
    flips=st.lists(st.tuples(st.integers(0, 399), st.integers(1, 255)), max_size=3),
    junk=st.binary(max_size=80),
)
def test_no_damage_ever_crashes_the_command(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flips: list[tuple[int, int]], junk: bytes
) -> None:
    data = bytearray(b"".join(three_batches())[:cut])
    for pos, mask in flips:
        if pos < len(data):
            data[pos] ^= mask
    path = write(tmp_path_factory.mktemp("fuzz"), f"{SEGMENT}.log", bytes(data) + junk)
    for args in ((), ("--json", "--records"), ("--verify",)):
        result = inspect(path, *args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        assert result.exit_code in ((0, 1) if args == ("--verify",) else (0,))
    for line in inspect(path, "--json", "--records").stdout.splitlines():
        json.loads(line)


# ---------------------------------------------------------------------------- .index


def offset_index(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_index(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def test_index_lists_relative_and_absolute_offsets(partition: Path) -> None:
    batches = [
        build_batch([(b"k", b"v")] * 2, base_offset=100, timestamp=T0),
        build_batch([(b"k", b"v")] * 2, base_offset=102, timestamp=T0),
    ]
    base = "00000000000000000100"
    write(partition, f"{base}.log", b"".join(batches))
    path = write(partition, f"{base}.index", offset_index((1, 0), (3, len(batches[0]))))
    result = inspect(path)
    assert result.exit_code == 0
    assert f"consistent with {base}.log" in result.stdout
    entries = of_type(json_lines(inspect(path, "--json")), "entry")
    assert [(e["relative_offset"], e["offset"], e["position"]) for e in entries] == [
        (1, 101, 0),
        (3, 103, len(batches[0])),
    ]
    assert inspect(path, "--verify").exit_code == 0


def test_index_entry_pointing_inside_a_batch_is_a_mismatch(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", offset_index((1, 0), (3, 30)))
    line = verify_error(inspect(path, "--verify"))
    assert line == (
        f"error: {SEGMENT}.index: entry 1 at file position 8: not a batch start: "
        f"position 30 is not the start of a batch in {SEGMENT}.log"
    )


def test_index_entry_whose_offset_is_not_in_its_batch_is_a_mismatch(
    partition: Path, log: Path
) -> None:
    second = positions(three_batches())[1]
    path = write(partition, f"{SEGMENT}.index", offset_index((5, second)))
    line = verify_error(inspect(path, "--verify"))
    assert "entry 0 at file position 0: offset mismatch: index offset 5" in line
    assert f"batch at position {second} holds offsets 2..4" in line
    assert "offset mismatch" in inspect(path).stdout


def test_index_entry_beyond_the_end_of_the_log_is_a_mismatch(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", offset_index((9, 1_000_000)))
    assert "beyond the end of" in verify_error(inspect(path, "--verify"))


def test_index_entry_past_where_the_log_became_unreadable_is_a_mismatch(
    partition: Path,
) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    data[positions(batches)[1] + 16] = 99  # an unknown magic byte: the walk stops there
    write(partition, f"{SEGMENT}.log", bytes(data))
    path = write(partition, f"{SEGMENT}.index", offset_index((5, positions(batches)[2])))
    line = verify_error(inspect(path, "--verify"))
    assert f"is past the damage at position {positions(batches)[1]} of {SEGMENT}.log" in line


def test_index_entries_out_of_order_are_reported(partition: Path, log: Path) -> None:
    second = positions(three_batches())[1]
    path = write(partition, f"{SEGMENT}.index", offset_index((3, second), (1, 0)))
    line = verify_error(inspect(path, "--verify"))
    assert "entry 1 at file position 8: out of order" in line


def test_index_with_a_partial_trailing_entry_is_reported(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", offset_index((1, 0)) + b"\x00\x00\x01")
    result = inspect(path)
    assert result.exit_code == 0
    assert "partial entry" in result.stdout
    line = verify_error(inspect(path, "--verify"))
    assert "file position 8: partial entry: 3 trailing bytes" in line


def test_index_with_trailing_zero_entries_is_reported(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", offset_index((1, 0)) + bytes(8 * 100))
    objs = json_lines(inspect(path, "--json"))
    assert len(of_type(objs, "entry")) == 1
    (damage,) = of_type(objs, "damage")
    assert damage["file_position"] == 8 and damage["problem"]["kind"] == "unused entries"
    assert "file position 8: unused entries: the last 100 entries" in verify_error(
        inspect(path, "--verify")
    )


def test_index_of_nothing_but_zeros_has_no_entries_in_use(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", bytes(8 * 50))
    objs = json_lines(inspect(path, "--json"))
    assert of_type(objs, "entry") == []
    assert "the last 50 entries are all zeros" in verify_error(inspect(path, "--verify"))


def test_index_entry_pointing_at_a_damaged_batch_is_a_mismatch(partition: Path) -> None:
    batches = three_batches()
    data = bytearray(b"".join(batches))
    data[positions(batches)[1] + 70] ^= 0x01
    write(partition, f"{SEGMENT}.log", bytes(data))
    path = write(partition, f"{SEGMENT}.index", offset_index((3, positions(batches)[1])))
    line = verify_error(inspect(path, "--verify"))
    assert f"position {positions(batches)[1]} is damaged in {SEGMENT}.log (CRC mismatch)" in line


def test_index_without_its_log_shows_entries_and_fails_verify(partition: Path) -> None:
    path = write(partition, f"{SEGMENT}.index", offset_index((1, 0), (3, 100)))
    result = inspect(path)
    assert result.exit_code == 0
    assert "warning:" in result.stderr and f"{SEGMENT}.log" in result.stderr
    assert len(of_type(json_lines(inspect(path, "--json")), "entry")) == 2
    assert f"cannot check against {SEGMENT}.log" in verify_error(inspect(path, "--verify"))


def test_index_limit_shows_the_first_entries(partition: Path, log: Path) -> None:
    ps = positions(three_batches())
    path = write(partition, f"{SEGMENT}.index", offset_index((1, 0), (3, ps[1]), (5, ps[2])))
    result = inspect(path, "--limit", "2")
    assert "1 more entry not shown" in result.stdout
    assert "Summary: 3 entries" in result.stdout


# ---------------------------------------------------------------------------- .timeindex


def test_timeindex_lists_timestamps_and_offsets(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.timeindex", time_index((T0 + 5, 1), (T0 + 2000, 5)))
    result = inspect(path)
    assert result.exit_code == 0
    assert "2024-05-01T12:00:02.000Z" in result.stdout
    entries = of_type(json_lines(inspect(path, "--json")), "entry")
    assert [(e["timestamp"], e["offset"]) for e in entries] == [(T0 + 5, 1), (T0 + 2000, 5)]
    assert inspect(path, "--verify").exit_code == 0


def test_timeindex_entry_whose_timestamp_disagrees_with_the_log(
    partition: Path, log: Path
) -> None:
    path = write(partition, f"{SEGMENT}.timeindex", time_index((T0 + 999, 3)))
    line = verify_error(inspect(path, "--verify"))
    assert f"entry 0 at file position 0: timestamp mismatch: index timestamp {T0 + 999}" in line
    assert f"up to offset 3 is {T0 + 1000}" in line


def test_timeindex_entry_whose_offset_is_not_in_the_log(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.timeindex", time_index((T0 + 2000, 50)))
    assert "offset not in log: no valid batch" in verify_error(inspect(path, "--verify"))


def test_timeindex_timestamps_that_go_backwards_are_reported(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.timeindex", time_index((T0 + 1000, 2), (T0 + 5, 4)))
    assert "entry 1 at file position 12: out of order" in verify_error(inspect(path, "--verify"))


def test_timeindex_with_a_partial_trailing_entry_is_reported(partition: Path, log: Path) -> None:
    path = write(partition, f"{SEGMENT}.timeindex", time_index((T0 + 5, 1)) + b"\x01" * 5)
    assert "file position 12: partial entry" in verify_error(inspect(path, "--verify"))


# ---------------------------------------------------------------------------- real segments


def test_every_file_the_log_engine_writes_passes_verify(tmp_path: Path) -> None:
    from pulllog.log.config import LogConfig
    from pulllog.log.log import Log

    directory = tmp_path / "orders-0"
    log = Log.open(directory, LogConfig(segment_bytes=4000, index_interval_bytes=300))
    for i in range(60):
        # Timestamps that sometimes go back: the time index keeps the largest so far.
        ts = T0 + (i * 7919) % 1000
        log.append(build_batch([(b"k%d" % i, b"v" * (i % 40))] * (1 + i % 3), timestamp=ts))
    log.close()
    files = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    assert len([p for p in files if p.suffix == ".log"]) > 1  # it rolled
    assert any(p.suffix == ".timeindex" and p.stat().st_size for p in files)
    for path in files:
        result = inspect(path, "--verify")
        assert result.exit_code == 0, (path.name, result.output)


# ---------------------------------------------------------------------------- usage errors


def test_a_missing_file_is_a_one_line_error_with_exit_code_2(tmp_path: Path) -> None:
    result = inspect(tmp_path / f"{SEGMENT}.log")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {tmp_path / SEGMENT}.log: no such file"]


def test_an_unknown_file_type_is_a_one_line_error_with_exit_code_2(partition: Path) -> None:
    path = write(partition, f"{SEGMENT}.snapshot", b"")
    result = inspect(path, "--verify")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "not a segment file; expected a .log, .index or .timeindex file" in line


def test_a_directory_is_a_one_line_error_with_exit_code_2(partition: Path) -> None:
    partition.mkdir()
    result = inspect(partition)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "is a directory" in line


def test_the_pulllog_command_lists_inspect() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "inspect" in result.stdout
