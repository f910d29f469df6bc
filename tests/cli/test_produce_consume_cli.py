"""`pulllog produce`, `consume` and `tail`: through click's runner and as real processes with pipes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from waits import block_until, parked_fetches

from pulllog.cli.main import main

PULLLOG = [sys.executable, "-m", "pulllog.cli.main"]


def run(*args: str, stdin: bytes | None = None) -> tuple[int, bytes, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    return result.exit_code, result.stdout_bytes, result.stderr


@pytest.fixture
def bs(pulllog_broker) -> str:
    return pulllog_broker.bootstrap_servers


def test_produce_lines_with_keys_and_headers_then_consume_them_as_json(bs) -> None:
    code, out, err = run("produce", "lines", "--key-separator", ":", "--header", "src=test", "--bootstrap-server", bs,
                         stdin=b"k1:v1\nk2:v2\nno-key-here\n")
    assert code == 0 and out == b"" and "sent 3 record(s)" in err
    code, out, err = run("consume", "lines", "--format", "json", "--bootstrap-server", bs)
    assert code == 0 and "consumed 3 record(s)" in err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(0, "k1", "v1"), (1, "k2", "v2"), (2, None, "no-key-here")]
    assert rows[0]["headers"] == [{"key": "src", "value": "test"}]


def test_consume_json_and_inspect_json_write_a_record_the_same_way(pulllog_broker, bs) -> None:
    """One JSON shape for a record's key, value and headers, whichever command prints it."""
    code, _, _ = run("produce", "same-json", "--key-separator", ":", "--header", "h=x", "--bootstrap-server", bs,
                     stdin=b"k:text\nk2:\xff\xfe binary\n")
    assert code == 0
    code, out, _ = run("consume", "same-json", "--format", "json", "--bootstrap-server", bs)
    consumed = [json.loads(line) for line in out.splitlines()]
    [segment] = sorted((pulllog_broker.data_dir / "same-json-0").glob("*.log"))
    code, out, _ = run("inspect", "segment", str(segment), "--records", "--json")
    inspected = [obj for obj in map(json.loads, out.splitlines()) if obj["type"] == "record"]
    assert [(r["key"], r["value"], r["headers"]) for r in inspected] == \
        [(r["key"], r["value"], r["headers"]) for r in consumed]
    assert consumed[1]["value"] == {"base64": "//4gYmluYXJ5"}


def test_from_offset_variants(bs) -> None:
    run("produce", "offsets", "--bootstrap-server", bs, stdin=b"".join(b"%d\n" % i for i in range(10)))

    def values(*extra: str) -> list[str]:
        code, out, _err = run("consume", "offsets", *extra, "--bootstrap-server", bs)
        assert code == 0
        return out.decode().split()

    assert values() == [str(i) for i in range(10)]
    assert values("--from-offset", "earliest", "--max-messages", "3") == ["0", "1", "2"]
    assert values("--from-offset", "7") == ["7", "8", "9"]
    assert values("--from-offset", "-2") == ["8", "9"]
    assert values("--from-offset", "latest") == []
    assert values("--from-offset", "2000-01-01T00:00:00+00:00") == [str(i) for i in range(10)]
    assert values("--from-offset", "2999-01-01T00:00:00+00:00") == []


def test_binary_values_come_out_as_base64_in_json(bs, pulllog_broker) -> None:
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bs})
    p.produce("binary", b"\xff\x00\xfe", key=b"\x80")
    p.flush(10)
    code, out, _ = run("consume", "binary", "--format", "json", "--bootstrap-server", bs)
    row = json.loads(out)
    assert row["value"] == {"base64": "/wD+"} and row["key"] == {"base64": "gA=="}


def test_offset_out_of_range_names_the_valid_range(bs) -> None:
    run("produce", "small", "--bootstrap-server", bs, stdin=b"a\nb\n")
    code, out, err = run("consume", "small", "--from-offset", "5", "--bootstrap-server", bs)
    assert code == 1 and "valid offsets are 0..2" in err and "Traceback" not in err


def test_unknown_topic_and_bad_arguments_are_one_line_errors(bs) -> None:
    code, _out, err = run("consume", "missing-topic", "--bootstrap-server", bs)
    assert code == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1
    code, _out, err = run("consume", "x", "--from-offset", "yesterday-ish", "--bootstrap-server", bs)
    assert code == 2 and "--from-offset" in err
    code, _out, err = run("produce", "x", "--header", "nokeyvalue", "--bootstrap-server", bs, stdin=b"a\n")
    assert code == 2 and "--header" in err


def test_unreachable_broker_is_one_line_with_a_hint() -> None:
    code, _out, err = run("consume", "t", "--bootstrap-server", "127.0.0.1:1")
    assert code == 1 and "pulllog serve" in err and len(err.strip().splitlines()) == 1


def test_pipes_between_real_processes(bs) -> None:
    produced = subprocess.run([*PULLLOG, "produce", "piped", "--bootstrap-server", bs],
                              input=b"".join(b"line %d\n" % i for i in range(500)), capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*PULLLOG, "consume", "piped", "--bootstrap-server", bs], capture_output=True, timeout=60)
    assert consumed.returncode == 0
    assert consumed.stdout.splitlines() == [b"line %d" % i for i in range(500)]


def test_tail_sees_a_later_produce(bs) -> None:
    run("produce", "tailed", "--bootstrap-server", bs, stdin=b"old\n")
    # -n 1: printing the last old record shows tail has found the end, so the next record is
    # produced after that (a fixed sleep raced with tail's start-up on a loaded machine).
    proc = subprocess.Popen([*PULLLOG, "tail", "tailed", "-n", "1", "--bootstrap-server", bs],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"old\n"
        run("produce", "tailed", "--bootstrap-server", bs, stdin=b"new\n")
        line = proc.stdout.readline()
        assert line == b"new\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_follow_blocks_until_a_record_arrives(pulllog_broker, bs) -> None:
    run("produce", "followed", "--bootstrap-server", bs, stdin=b"first\n")
    proc = subprocess.Popen([*PULLLOG, "consume", "followed", "--follow", "--max-messages", "2",
                             "--bootstrap-server", bs], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"first\n"
        block_until(lambda: parked_fetches(pulllog_broker, "followed") >= 1, "the follower's fetch is parked")
        assert proc.poll() is None  # still waiting: the iterator does not end
        run("produce", "followed", "--bootstrap-server", bs, stdin=b"second\n")
        assert proc.stdout.readline() == b"second\n"
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_consume_as_a_group_member_commits_what_it_read(bs) -> None:
    run("produce", "grouped", "--bootstrap-server", bs, stdin=b"a\nb\nc\nd\n")
    code, out, _err = run("consume", "grouped", "--group", "cli-readers", "--from-offset", "earliest",
                          "--max-messages", "3", "--bootstrap-server", bs)
    assert code == 0 and out.split() == [b"a", b"b", b"c"]
    code, out, _err = run("group", "describe", "cli-readers", "--json", "--bootstrap-server", bs)
    assert code == 0
    assert [r["committed_offset"] for r in json.loads(out)["partitions"]] == [3]
    code, out, _err = run("consume", "grouped", "--group", "cli-readers", "--max-messages", "1",
                          "--bootstrap-server", bs)
    assert out.split() == [b"d"]  # the group resumes where it committed


# ---------------------------------------------------------------------------- issue 15: as a new user meets them


def test_group_with_an_offset_is_refused_naming_the_reset_command(bs) -> None:
    run("produce", "refused", "--bootstrap-server", bs, stdin=b"a\nb\nc\nd\n")
    for where, target in (("3", "--to-offset 3"), ("-2", "--to-latest"),
                          ("2026-11-22T14:00:00+00:00", "--to-datetime 2026-11-22T14:00:00+00:00")):
        code, out, err = run("consume", "refused", "--group", "g", "--from-offset", where, "--bootstrap-server", bs)
        assert code == 2 and out == b""
        assert f"--from-offset {where} cannot be used with --group" in err
        assert f"pulllog group reset-offsets g --topic refused {target}" in err
        assert len(err.strip().splitlines()) == 1


def test_group_without_follow_ends_at_the_log_end(bs) -> None:
    run("produce", "ends", "--bootstrap-server", bs, stdin=b"a\nb\nc\n")
    code, out, err = run("consume", "ends", "--group", "enders", "--bootstrap-server", bs)
    assert code == 0 and out.split() == [b"a", b"b", b"c"] and "consumed 3 record(s)" in err
    code, out, err = run("consume", "ends", "--group", "enders", "--bootstrap-server", bs)
    assert code == 0 and out == b"" and "consumed 0 record(s)" in err  # nothing new: ends at once


def test_group_from_latest_starts_a_new_group_at_the_end(bs) -> None:
    run("produce", "late", "--bootstrap-server", bs, stdin=b"old\n")
    code, out, _err = run("consume", "late", "--group", "latecomers", "--from-offset", "latest",
                          "--bootstrap-server", bs)
    assert code == 0 and out == b""
    code, out, _err = run("group", "describe", "latecomers", "--json", "--bootstrap-server", bs)
    assert [r["committed_offset"] for r in json.loads(out)["partitions"]] in ([None], [])


def test_negative_counts_are_usage_errors(bs) -> None:
    code, _out, err = run("consume", "x", "--max-messages", "-1", "--bootstrap-server", bs)
    assert code == 2 and "--max-messages" in err
    code, _out, err = run("consume", "x", "--max-messages", "0", "--bootstrap-server", bs)
    assert code == 2 and "--max-messages" in err
    code, _out, err = run("tail", "x", "-n", "-3", "--bootstrap-server", bs)
    assert code == 2 and "-n" in err


def test_kv_and_value_formats_print_a_null_key_or_value_as_null_and_an_empty_one_as_nothing(bs) -> None:
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bs})
    p.produce("nulls", b"v1")               # null key
    p.produce("nulls", b"v2", key=b"")      # empty key
    p.produce("nulls", None, key=b"k3")     # null value (a tombstone)
    p.produce("nulls", b"", key=b"k4")      # empty value
    assert p.flush(10) == 0
    _code, out, _err = run("consume", "nulls", "--format", "kv", "--bootstrap-server", bs)
    assert out.split(b"\n") == [b"null\tv1", b"\tv2", b"k3\tnull", b"k4\t", b""]
    _code, out, _err = run("consume", "nulls", "--format", "value", "--bootstrap-server", bs)
    assert out.split(b"\n") == [b"v1", b"v2", b"null", b"", b""]
    _code, out, _err = run("consume", "nulls", "--format", "json", "--bootstrap-server", bs)
    assert [(r["key"], r["value"]) for r in map(json.loads, out.splitlines())] == [
        (None, "v1"), ("", "v2"), ("k3", None), ("k4", "")]
