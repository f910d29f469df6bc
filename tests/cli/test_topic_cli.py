"""`pulllog topic create|list|describe|alter|delete`: through click's runner against the
in-process broker, and as real processes against `pulllog serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from click.testing import CliRunner, Result
from waits import wait_for_listener

from pulllog.cli.main import main
from pulllog.testing import BrokerThread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pulllog(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the command in-process; output is not a terminal, so rows are never wrapped."""
    return CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None, "COLUMNS": None, **(env or {})}).invoke(main, list(args))


@pytest.fixture
def topic(pulllog_broker: BrokerThread):
    """``topic("create", "x")`` = ``pulllog topic create x --bootstrap-server <the test broker>``."""

    def run(*args: str) -> Result:
        return pulllog("topic", *args, "--bootstrap-server", pulllog_broker.bootstrap_servers)

    return run


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def one_line_error(result: Result, exit_code: int) -> str:
    """The command failed the pulllog way: exit code, one `error:` line on stderr, no traceback."""
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def produce(broker: BrokerThread, topic: str, partition: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(count):
        producer.produce(topic, b"record %d" % i, partition=partition)
    assert producer.flush(10) == 0


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


# ---------------------------------------------------------------------------- create / list


def test_create_then_list_shows_the_name_and_partition_count(topic) -> None:
    assert ok(topic("create", "events", "--partitions", "3")).stdout == "created topic 'events' with 3 partitions\n"

    listed = ok(topic("list")).stdout

    assert ["events", "3"] in rows(listed)


def test_create_existing_topic_fails_with_one_line(topic) -> None:
    ok(topic("create", "events"))

    assert one_line_error(topic("create", "events"), 1) == "error: topic 'events' already exists"


def test_create_if_not_exists_succeeds_for_an_existing_topic(topic) -> None:
    ok(topic("create", "events"))

    assert ok(topic("create", "events", "--if-not-exists")).stdout == "topic 'events' already exists\n"


def test_create_with_zero_partitions_is_a_usage_error(topic) -> None:
    assert "at least 1 partition" in one_line_error(topic("create", "t", "--partitions", "0"), 2)


def test_create_with_a_config_that_is_not_name_equals_value_is_a_usage_error(topic) -> None:
    line = one_line_error(topic("create", "t", "--config", "retention.ms"), 2)

    assert line == "error: --config 'retention.ms': expected NAME=VALUE, e.g. --config retention.ms=86400000"


def test_create_with_an_invalid_config_value_fails_naming_it(topic) -> None:
    line = one_line_error(topic("create", "t", "--config", "retention.ms=soon"), 1)

    assert line == "error: cannot create topic 't': retention.ms='soon': expected a whole number"


def test_create_validate_only_creates_nothing(topic) -> None:
    out = ok(topic("create", "t", "-p", "2", "--validate-only")).stdout

    assert "would be created" in out
    assert ok(topic("list", "--json")).stdout == ""


def test_list_json_is_one_object_per_topic(topic) -> None:
    ok(topic("create", "b", "-p", "2"))
    ok(topic("create", "a"))

    objs = [json.loads(line) for line in ok(topic("list", "--json")).stdout.splitlines()]

    assert [(o["name"], o["partitions"], o["internal"]) for o in objs] == [("a", 1, False), ("b", 2, False)]


def test_list_with_no_topics_says_so_on_stderr_and_nothing_on_stdout(topic) -> None:
    result = ok(topic("list"))

    assert result.stdout == ""
    assert "no topics yet" in result.stderr


# ---------------------------------------------------------------------------- describe


def test_describe_shows_partitions_offsets_and_sizes(topic, pulllog_broker: BrokerThread) -> None:
    ok(topic("create", "events", "--partitions", "2"))
    produce(pulllog_broker, "events", 1, 4)
    size = pulllog_broker.call(lambda: pulllog_broker.broker.topics.partition("events", 1).log.size_bytes)

    out = ok(topic("describe", "events")).stdout

    assert out.startswith("Topic events  2 partitions, ")
    table = rows(out)
    header = table.index(["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG", "START", "LOG", "END", "SIZE"])
    assert table[header + 2] == ["0", "0", "0", "0", "0", "0", "0", "B"]
    assert table[header + 3][:6] == ["1", "0", "0", "0", "0", "4"]
    assert size > 0 and " ".join(table[header + 3][6:]) == (f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB")


def test_describe_lists_overrides_first_then_defaults(topic) -> None:
    ok(topic("create", "events", "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact"))

    table = rows(ok(topic("describe", "events")).stdout)

    first = table.index(["CONFIG", "VALUE", "SOURCE"]) + 2
    assert table[first:first + 3] == [["cleanup.policy", "compact", "override"],
                                      ["retention.ms", "86400000", "override"],
                                      ["compression.type", "producer", "default"]]


def test_describe_json_has_offsets_sizes_and_config_sources(topic, pulllog_broker: BrokerThread) -> None:
    ok(topic("create", "events", "--partitions", "2", "--config", "retention.ms=1000"))
    produce(pulllog_broker, "events", 0, 3)

    (line,) = ok(topic("describe", "events", "--json")).stdout.splitlines()
    obj = json.loads(line)

    assert [(p["partition"], p["leader"], p["log_start_offset"], p["log_end_offset"]) for p in obj["partitions"]] == [
        (0, 0, 0, 3), (1, 0, 0, 0)]
    assert obj["partitions"][0]["size_bytes"] > 0 and obj["partitions"][1]["size_bytes"] == 0
    assert obj["size_bytes"] == obj["partitions"][0]["size_bytes"]
    assert obj["configs"]["retention.ms"] == {"value": "1000", "source": "override"}
    assert obj["configs"]["segment.bytes"] == {"value": "1073741824", "source": "default"}


def test_describe_unknown_topic_fails_with_a_hint(topic) -> None:
    line = one_line_error(topic("describe", "ghost"), 1)

    assert line == "error: topic 'ghost' does not exist; create it with `pulllog topic create ghost`"


# ---------------------------------------------------------------------------- alter / delete


def test_alter_adds_partitions_and_sets_a_config(topic) -> None:
    ok(topic("create", "events"))

    out = ok(topic("alter", "events", "--partitions", "3", "--config", "retention.ms=5000")).stdout

    assert out == "altered topic 'events': set retention.ms=5000, now 3 partitions\n"
    obj = json.loads(ok(topic("describe", "events", "--json")).stdout)
    assert len(obj["partitions"]) == 3
    assert obj["configs"]["retention.ms"] == {"value": "5000", "source": "override"}


def test_alter_delete_config_goes_back_to_the_default(topic) -> None:
    ok(topic("create", "events", "--config", "retention.ms=5000"))

    ok(topic("alter", "events", "--delete-config", "retention.ms"))

    obj = json.loads(ok(topic("describe", "events", "--json")).stdout)
    assert obj["configs"]["retention.ms"]["source"] == "default"


def test_alter_delete_config_of_a_config_that_is_not_set_says_so(topic) -> None:
    ok(topic("create", "events", "--config", "retention.ms=5000"))

    out = ok(topic("alter", "events", "--delete-config", "segment.bytes", "--delete-config", "retention.ms")).stdout

    assert out == "altered topic 'events': removed retention.ms, segment.bytes was not set (nothing to remove)\n"
    out = ok(topic("alter", "events", "--delete-config", "retention.ms")).stdout
    assert out == "nothing changed on topic 'events': retention.ms was not set (nothing to remove)\n"


def test_alter_delete_config_of_an_unknown_name_is_a_usage_error(topic) -> None:
    ok(topic("create", "events"))

    line = one_line_error(topic("alter", "events", "--delete-config", "notset"), 2)

    assert "topic 'events' has no config 'notset'" in line and "removed" not in line


def test_alter_to_fewer_partitions_fails_with_one_line(topic) -> None:
    ok(topic("create", "events", "--partitions", "3"))

    assert "must be larger, not 2" in one_line_error(topic("alter", "events", "--partitions", "2"), 1)


def test_alter_with_nothing_to_change_is_a_usage_error(topic) -> None:
    assert "nothing to change" in one_line_error(topic("alter", "events"), 2)


def test_delete_removes_the_topic(topic) -> None:
    ok(topic("create", "keep"))
    ok(topic("create", "drop"))

    assert ok(topic("delete", "drop")).stdout == "deleted topic 'drop'\n"

    assert [o["name"] for o in map(json.loads, ok(topic("list", "--json")).stdout.splitlines())] == ["keep"]


def test_delete_unknown_topic_fails_with_one_line(topic) -> None:
    assert one_line_error(topic("delete", "ghost"), 1) == "error: topic 'ghost' does not exist (see `pulllog topic list`)"


def test_delete_if_exists_ignores_an_unknown_topic(topic) -> None:
    assert ok(topic("delete", "ghost", "--if-exists")).stdout == ""


# ---------------------------------------------------------------------------- --bootstrap-server


def test_bootstrap_server_comes_from_the_environment(pulllog_broker: BrokerThread) -> None:
    env = {"PULLLOG_BOOTSTRAP_SERVERS": pulllog_broker.bootstrap_servers}

    ok(pulllog("topic", "create", "from-env", env=env))

    assert ["from-env", "1"] in rows(ok(pulllog("topic", "list", env=env)).stdout)


def test_unreachable_broker_is_one_line_naming_the_address() -> None:
    port = free_port()

    line = one_line_error(pulllog("topic", "list", "--bootstrap-server", f"127.0.0.1:{port}"), 1)

    assert line == (f"error: cannot connect to a broker at 127.0.0.1:{port} (connection refused); "
                    "is one running? start one with `pulllog serve`")


def test_a_malformed_bootstrap_server_is_a_usage_error() -> None:
    line = one_line_error(pulllog("topic", "list", "--bootstrap-server", "localhost:ninety"), 2)

    assert line == "error: bad bootstrap server 'localhost:ninety': expected HOST:PORT, e.g. 127.0.0.1:9092"


# ---------------------------------------------------------------------------- real processes


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PULLLOG_BOOTSTRAP_SERVERS"}
    return subprocess.run([sys.executable, "-m", "pulllog.cli.main", *args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[str]:
    """`pulllog serve` as a subprocess on a free port; yields its bootstrap address."""
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
                             "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_listener(port, proc, tmp_path / "serve.log")
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_process_topic_create_then_list_against_pulllog_serve(serve: str) -> None:
    created = run_cli("topic", "create", "orders", "--partitions", "4", "--bootstrap-server", serve)
    assert (created.returncode, created.stdout, created.stderr) == (0, "created topic 'orders' with 4 partitions\n", "")

    listed = run_cli("topic", "list", "--bootstrap-server", serve)

    assert listed.returncode == 0, listed.stderr
    assert ["orders", "4"] in rows(listed.stdout)


def test_process_topic_describe_json_against_pulllog_serve(serve: str) -> None:
    assert run_cli("topic", "create", "orders", "-p", "2", "--bootstrap-server", serve).returncode == 0

    described = run_cli("topic", "describe", "orders", "--json", "--bootstrap-server", serve)

    assert described.returncode == 0, described.stderr
    obj = json.loads(described.stdout)
    assert [(p["partition"], p["log_end_offset"], p["size_bytes"]) for p in obj["partitions"]] == [(0, 0, 0), (1, 0, 0)]


def test_process_unreachable_broker_prints_one_line_and_no_traceback() -> None:
    port = free_port()

    result = run_cli("topic", "create", "orders", "--bootstrap-server", f"127.0.0.1:{port}")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (f"error: cannot connect to a broker at 127.0.0.1:{port} (connection refused); "
                             "is one running? start one with `pulllog serve`\n")
