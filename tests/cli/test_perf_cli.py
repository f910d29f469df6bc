"""`pulllog perf produce|consume` against the test broker, with both clients: what the output
says (shape and counts), never how fast."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from pulllog.cli.main import main
from pulllog.testing import BrokerThread

CLIENTS = ["pulllog", "librdkafka"]
LATENCY_KEYS = {"avg", "p50", "p99", "p99.9", "max"}


def pulllog(*args: str) -> Result:
    return CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None, "COLUMNS": None}).invoke(main, list(args))


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def perf(broker: BrokerThread, *args: str) -> Result:
    return pulllog("perf", *args, "--bootstrap-server", broker.bootstrap_servers)


def failed(result: Result, exit_code: int) -> str:
    """Failed the pulllog way: the exit code, an `error:` line last on stderr, no traceback."""
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    return last


@pytest.mark.parametrize("client", CLIENTS)
def test_produce_reports_every_record_acknowledged(pulllog_broker: BrokerThread, client: str) -> None:
    result = ok(perf(pulllog_broker, "produce", f"perf-{client}", "--num-records", "3000", "--record-size", "100",
                     "--client", client, "--json"))

    report = json.loads(result.stdout)
    assert report["command"] == "produce" and report["client"] == client
    assert (report["records"], report["bytes"], report["errors"]) == (3000, 300_000, 0)
    assert set(report["latency_ms"]) == LATENCY_KEYS
    lat = report["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    assert report["msgs_per_s"] > 0 and report["mb_per_s"] > 0


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_reads_what_produce_wrote(pulllog_broker: BrokerThread, client: str) -> None:
    topic = f"perf-roundtrip-{client}"
    ok(perf(pulllog_broker, "produce", topic, "--num-records", "2500", "--record-size", "200", "--client", client,
            "--acks", "all", "--batch-size", "4096", "--compression", "lz4", "--json"))

    result = ok(perf(pulllog_broker, "consume", topic, "--messages", "2500", "--fetch-max-bytes", "204800",
                     "--client", client, "--json"))

    report = json.loads(result.stdout)
    assert (report["command"], report["client"]) == ("consume", client)
    assert (report["records"], report["bytes"], report["errors"]) == (2500, 500_000, 0)
    assert set(report["latency_ms"]) == LATENCY_KEYS


def test_produce_prints_one_row_under_the_column_names(pulllog_broker: BrokerThread) -> None:
    result = ok(perf(pulllog_broker, "produce", "perf-table", "--num-records", "500", "--record-size", "10"))

    lines = result.stdout.splitlines()
    assert "produce perf-table with pulllog: 10-byte records, acks=1" in lines[0]
    assert lines[1].split() == ["records", "msgs/s", "MB/s", "avg", "ms", "p50", "ms", "p99", "ms", "p99.9", "ms",
                                "max", "ms"]
    assert lines[2].split()[0] == "500" and len(lines[2].split()) == 8
    assert "500/500" in result.stderr  # the progress line, finished


def test_throughput_cap_still_sends_everything(pulllog_broker: BrokerThread) -> None:
    result = ok(perf(pulllog_broker, "produce", "perf-capped", "--num-records", "200", "--record-size", "50",
                     "--throughput", "2000", "--json"))

    assert json.loads(result.stdout)["records"] == 200


def test_consume_of_more_than_the_topic_holds_fails_with_the_count(pulllog_broker: BrokerThread) -> None:
    ok(perf(pulllog_broker, "produce", "perf-short", "--num-records", "100", "--record-size", "10"))

    line = failed(perf(pulllog_broker, "consume", "perf-short", "--messages", "150", "--timeout-ms", "500"), 1)

    assert "read 100 of 150" in line


@pytest.mark.parametrize("args", [["--num-records", "0", "--record-size", "10"],
                                  ["--num-records", "10", "--record-size", "10", "--batch-size", "0"]])
def test_bad_produce_arguments_are_usage_errors(pulllog_broker: BrokerThread, args: list[str]) -> None:
    failed(perf(pulllog_broker, "produce", "perf-bad", *args), 2)


def test_an_unreachable_broker_is_one_line(pulllog_broker: BrokerThread) -> None:
    line = failed(pulllog("perf", "produce", "t", "--num-records", "1", "--record-size", "1",
                          "--bootstrap-server", "127.0.0.1:1"), 1)

    assert "127.0.0.1:1" in line
