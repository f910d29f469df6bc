"""`pulllog group` against a real broker with a real librdkafka consumer group."""

from __future__ import annotations

import json
import time

import confluent_kafka
import confluent_kafka.admin as ka
import pytest
from click.testing import CliRunner

from pulllog.cli.main import main


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def consumed_group(pulllog_broker):
    """Group 'readers' consumed all 30 records of 'events' (3 partitions) and committed."""
    bs = pulllog_broker.bootstrap_servers
    admin = ka.AdminClient({"bootstrap.servers": bs})
    admin.create_topics([ka.NewTopic("events", 3, 1)])["events"].result(10)
    producer = confluent_kafka.Producer({"bootstrap.servers": bs})
    for i in range(30):
        producer.produce("events", b"%d" % i, partition=i % 3, timestamp=1_700_000_000_000 + i * 1000)
    producer.flush(10)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "readers", "client.id": "reader-1",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["events"])
    got, deadline = 0, time.monotonic() + 20
    while got < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    del admin
    yield pulllog_broker, consumer
    consumer.close()


def test_group_list_shows_the_group_and_its_state(consumed_group) -> None:
    broker, _consumer = consumed_group
    code, out, _ = run("group", "list", "--json", "--bootstrap-server", broker.bootstrap_servers)
    assert code == 0
    assert {"group": "readers", "state": "Stable", "protocol_type": "consumer"} in [json.loads(l) for l in out.splitlines()]


def test_group_describe_shows_members_offsets_and_lag(consumed_group) -> None:
    broker, _consumer = consumed_group
    code, out, _ = run("group", "describe", "readers", "--json", "--bootstrap-server", broker.bootstrap_servers)
    assert code == 0
    data = json.loads(out)
    assert data["state"] == "Stable" and data["members"][0]["client_id"] == "reader-1"
    assert sorted(r["partition"] for r in data["partitions"]) == [0, 1, 2]
    assert all(r["committed_offset"] == 10 and r["lag"] == 0 for r in data["partitions"])
    code, text, _ = run("group", "describe", "readers", "--bootstrap-server", broker.bootstrap_servers)
    assert code == 0 and "reader-1" in text and "Stable" in text


def test_reset_offsets_refuses_while_members_are_active(consumed_group) -> None:
    broker, _consumer = consumed_group
    code, _out, err = run("group", "reset-offsets", "readers", "--topic", "events", "--to-earliest", "--execute",
                          "--bootstrap-server", broker.bootstrap_servers)
    assert code == 1 and "active member" in err and "Traceback" not in err


def test_reset_offsets_dry_run_then_execute_rewinds_to_a_datetime(consumed_group) -> None:
    broker, consumer = consumed_group
    consumer.close()
    bs = broker.bootstrap_servers
    when = "2023-11-14T22:13:35+00:00"  # 1_699_999_... + 15 s: record 15 and after
    code, out, err = run("group", "reset-offsets", "readers", "--topic", "events", "--to-datetime", when,
                         "--bootstrap-server", bs)
    assert code == 0 and "dry run" in err
    code, out, _ = run("group", "describe", "readers", "--json", "--bootstrap-server", bs)
    assert all(r["committed_offset"] == 10 for r in json.loads(out)["partitions"])  # nothing changed
    code, _out, err = run("group", "reset-offsets", "readers", "--topic", "events", "--to-datetime", when,
                          "--execute", "--bootstrap-server", bs)
    assert code == 0
    code, out, _ = run("group", "describe", "readers", "--json", "--bootstrap-server", bs)
    offsets = {r["partition"]: r["committed_offset"] for r in json.loads(out)["partitions"]}
    # record i (timestamp base + i s) sits on partition i % 3 at offset i // 3; first i >= 15:
    assert offsets == {0: 5, 1: 5, 2: 5}
    # a consumer in the group re-reads from there
    again = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "readers", "auto.offset.reset": "error"})
    again.subscribe(["events"])
    values, deadline = [], time.monotonic() + 20
    while len(values) < 15 and time.monotonic() < deadline:
        msg = again.poll(0.2)
        if msg is not None and not msg.error():
            values.append(int(msg.value()))
    again.close()
    assert sorted(values) == list(range(15, 30))


def test_shift_by_and_delete(consumed_group) -> None:
    broker, consumer = consumed_group
    consumer.close()
    bs = broker.bootstrap_servers
    code, _out, _err = run("group", "reset-offsets", "readers", "--topic", "events", "--partition", "1",
                           "--shift-by", "-4", "--execute", "--bootstrap-server", bs)
    assert code == 0
    code, out, _ = run("group", "describe", "readers", "--json", "--bootstrap-server", bs)
    assert {r["partition"]: r["committed_offset"] for r in json.loads(out)["partitions"]} == {0: 10, 1: 6, 2: 10}
    assert run("group", "delete", "readers", "--bootstrap-server", bs)[0] == 0
    code, _out, err = run("group", "delete", "readers", "--bootstrap-server", bs)
    assert code == 1 and "does not exist" in err


def test_delete_reports_every_groups_outcome_and_fails_if_any_failed(consumed_group) -> None:
    broker, consumer = consumed_group
    bs = broker.bootstrap_servers
    other = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "auditors", "enable.auto.commit": False})
    other.commit(offsets=[confluent_kafka.TopicPartition("events", 0, 5)], asynchronous=False)
    other.close()
    consumer.close()

    code, out, err = run("group", "delete", "nosuch", "readers", "auditors", "--bootstrap-server", bs)

    assert code == 1
    assert out.splitlines() == ["deleted group 'readers'", "deleted group 'auditors'"]
    assert err.splitlines() == ["error: group 'nosuch' does not exist"]
    code, out, _err = run("group", "list", "--json", "--bootstrap-server", bs)
    assert code == 0 and out == ""


def test_bad_reset_arguments_are_one_line_usage_errors(pulllog_broker) -> None:
    code, _out, err = run("group", "reset-offsets", "g", "--topic", "t", "--bootstrap-server",
                          pulllog_broker.bootstrap_servers)
    assert code == 2 and "exactly one of" in err
