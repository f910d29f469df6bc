"""The cluster commands against one pulllog broker (tests/cluster_clients has them against a
3-node Kafka cluster): a single broker's topics have one replica, on it, always in sync, and
no leader election is needed. Through click's runner, in-process."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from pulllog.cli.main import main
from pulllog.testing import BrokerThread


def pulllog(broker: BrokerThread, *args: str) -> Result:
    runner = CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None, "COLUMNS": None})
    return runner.invoke(main, [*args, "--bootstrap-server", broker.bootstrap_servers])


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def one_line_error(result: Result, exit_code: int) -> str:
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_replica_assignment_on_one_broker(pulllog_broker: BrokerThread) -> None:
    out = ok(pulllog(pulllog_broker, "topic", "create", "placed", "--replica-assignment", "0,0,0"))
    assert out == "created topic 'placed' with 3 partitions, replication factor 1\n"
    described = json.loads(ok(pulllog(pulllog_broker, "topic", "describe", "placed", "--json")))
    assert [(p["leader"], p["replicas"], p["isr"], p["offline_replicas"]) for p in described["partitions"]] == [
        (0, [0], [0], [])] * 3
    error = one_line_error(pulllog(pulllog_broker, "topic", "create", "elsewhere", "--replica-assignment", "7"), 1)
    assert error.startswith("error: cannot create topic 'elsewhere': ") and "7" in error


def test_replica_assignment_usage_errors(pulllog_broker: BrokerThread) -> None:
    assert "not broker ids" in one_line_error(
        pulllog(pulllog_broker, "topic", "create", "t", "--replica-assignment", "0:x"), 2)
    assert "has a broker twice" in one_line_error(
        pulllog(pulllog_broker, "topic", "create", "t", "--replica-assignment", "0:0"), 2)
    assert "same number of replicas" in one_line_error(
        pulllog(pulllog_broker, "topic", "create", "t", "--replica-assignment", "0:1,0"), 2)
    assert "leave out --partitions" in one_line_error(
        pulllog(pulllog_broker, "topic", "create", "t", "--replica-assignment", "0", "--partitions", "2"), 2)
    assert "at least 1 replica" in one_line_error(
        pulllog(pulllog_broker, "topic", "create", "t", "--replication-factor", "0"), 2)


def test_cluster_describe_on_one_broker_has_nothing_under_replicated(pulllog_broker: BrokerThread) -> None:
    ok(pulllog(pulllog_broker, "topic", "create", "whole", "--partitions", "2"))
    described = json.loads(ok(pulllog(pulllog_broker, "cluster", "describe", "--json")))
    assert described["under_replicated_partitions"] == [] and described["offline_partitions"] == []
    assert "2 partition(s): 0 under-replicated, 0 offline" in ok(pulllog(pulllog_broker, "cluster", "describe"))


def test_leader_election_on_one_broker_is_not_needed(pulllog_broker: BrokerThread) -> None:
    """A single broker leads every partition already: ElectLeaders answers ELECTION_NOT_NEEDED,
    printed as Kafka's tool prints it, exit 0."""
    ok(pulllog(pulllog_broker, "topic", "create", "alone"))
    out = ok(pulllog(pulllog_broker, "leader-election", "--election-type", "preferred", "--topic", "alone"))
    assert out == "Valid replica already elected for partitions alone-0\n"
    assert "exactly one of --topic" in one_line_error(
        pulllog(pulllog_broker, "leader-election", "--election-type", "preferred"), 2)
    assert "--partition needs --topic" in one_line_error(
        pulllog(pulllog_broker, "leader-election", "--election-type", "preferred", "--all-topic-partitions",
                "--partition", "0"), 2)


def test_reassignment_on_one_broker(pulllog_broker: BrokerThread, tmp_path: Path) -> None:
    ok(pulllog(pulllog_broker, "topic", "create", "staying", "--partitions", "1"))
    # a one-broker cluster: its own id is the only replica set there is
    assert ok(pulllog(pulllog_broker, "topic", "reassign", "staying", "--partition", "0", "--replicas", "0")) == \
        "Successfully started partition reassignment for staying-0\n"
    error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", "staying", "--partition", "0",
                                   "--replicas", "0,7"), 1)
    assert error.startswith("error: staying-0: INVALID_REPLICA_ASSIGNMENT: ") and "not alive" in error
    error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", "staying", "--partition", "0", "--cancel"), 1)
    assert error.startswith("error: staying-0: NO_REASSIGNMENT_IN_PROGRESS: ")
    error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", "nowhere", "--partition", "0",
                                   "--replicas", "0"), 1)
    assert error.startswith("error: nowhere-0: UNKNOWN_TOPIC_OR_PARTITION: ")
    assert ok(pulllog(pulllog_broker, "topic", "reassignments")) == "no partition reassignment is in progress\n"
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"version": 1, "partitions": [{"topic": "staying", "partition": 0, "replicas": [0],
                                                               "log_dirs": ["any"]}]}))
    assert ok(pulllog(pulllog_broker, "topic", "reassign", "--reassignment-json-file", str(moves))) == \
        "Successfully started partition reassignment for staying-0\n"


def test_reassignment_usage_errors(pulllog_broker: BrokerThread, tmp_path: Path) -> None:
    for args, says in [
        (["staying"], "NAME --partition P --replicas"),
        (["staying", "--partition", "0"], "exactly one of --replicas B,B,... and --cancel"),
        (["staying", "--partition", "0", "--replicas", "1", "--cancel"], "exactly one of"),
        (["staying", "--partition", "0", "--replicas", "1,x"], "expected broker ids separated by commas"),
        (["--reassignment-json-file", str(tmp_path / "missing.json")], "--reassignment-json-file"),
    ]:
        error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", *args), 2)
        assert says in error, (args, error)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"partitions": [{"topic": "t"}]}')
    error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", "--reassignment-json-file", str(wrong)), 2)
    assert "expected {\"version\": 1" in error
    dirs = tmp_path / "dirs.json"
    dirs.write_text('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data/a"]}]}')
    error = one_line_error(pulllog(pulllog_broker, "topic", "reassign", "--reassignment-json-file", str(dirs)), 2)
    assert "log_dirs" in error
