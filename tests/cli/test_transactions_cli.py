"""`pulllog transactions find-hanging` and `abort` on a hanging transaction.

A hanging transaction is open in a partition while no coordinator will end it. Here one is
made by appending a transactional batch straight to the partition's log, as a producer whose
coordinator lost its transaction would have left it; a librdkafka transaction that its
coordinator knows about sits beside it and must not be reported.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import confluent_kafka
import confluent_kafka.admin
from click.testing import CliRunner
from waits import on_broker

from pulllog.broker.broker import Broker
from pulllog.cli.main import main
from pulllog.client.admin import Admin, OffsetSpec
from pulllog.client.types import TopicPartition
from pulllog.records import build_batch

TOPIC = "orders"
HANGING_PRODUCER = 777_777
TIMEOUT_S = 60


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["transactions", *args])
    return result.exit_code, result.stdout, result.stderr


def _last_stable_offset(bootstrap: str) -> int:
    async def body() -> int:
        async with Admin(bootstrap) as admin:
            found = (await admin.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.LATEST}, read_committed=True))
            listed = found[TopicPartition(TOPIC, 0)]
            assert listed is not None
            return listed.offset
    return asyncio.run(body())


def _append_hanging_transaction(broker: Any, minutes_ago: int, epoch: int = 0) -> int:
    """Two records of a transaction no coordinator knows about; returns its first offset."""
    written = int(time.time() * 1000) - minutes_ago * 60_000
    batch = build_batch([(None, b"h0", written), (None, b"h1", written)], producer_id=HANGING_PRODUCER,
                        producer_epoch=epoch, base_sequence=0, transactional=True)

    def append(b: Broker) -> int:
        log = b.partition(TOPIC, 0)
        first = log.append(batch).first_offset  # type: ignore[union-attr]
        b.on_append(TOPIC, 0)
        return first
    return int(on_broker(broker, append))


def test_find_hanging_reports_only_the_transaction_no_coordinator_knows_and_abort_ends_it(
        pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT_S)
    hanging_start = _append_hanging_transaction(pulllog_broker, minutes_ago=20)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "live"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"live", partition=0)
    producer.flush(TIMEOUT_S)  # an open transaction its coordinator lists: not hanging
    assert _last_stable_offset(bootstrap) == hanging_start

    code, out, err = _cli("find-hanging", "--json", "--bootstrap-server", bootstrap)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["topic"], r["partition"], r["producer_id"], r["start_offset"], r["coordinator_epoch"]) for r in rows] \
        == [(TOPIC, 0, HANGING_PRODUCER, hanging_start, -1)]
    assert rows[0]["duration_min"] >= 20
    # Younger than the maximum transaction timeout: not a candidate yet.
    code, out, _ = _cli("find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "30", "--json",
                        "--bootstrap-server", bootstrap)
    assert code == 0 and out == ""

    code, out, err = _cli("abort", "--topic", TOPIC, "--partition", "0", "--start-offset", str(hanging_start),
                          "--bootstrap-server", bootstrap)
    assert code == 0, err
    assert out.strip() == f"aborted producer {HANGING_PRODUCER}'s transaction in {TOPIC}-0 (started at offset 0)"
    assert _last_stable_offset(bootstrap) == 2  # now the live transaction's first offset
    code, out, _ = _cli("find-hanging", "--json", "--bootstrap-server", bootstrap)
    assert code == 0 and out == ""
    code, _, err = _cli("abort", "--topic", TOPIC, "--partition", "0", "--producer-id", str(HANGING_PRODUCER),
                        "--bootstrap-server", bootstrap)
    assert code == 1 and err == f"error: no open transaction of producer id {HANGING_PRODUCER} in {TOPIC}-0; " \
        f"`pulllog transactions describe-producers {TOPIC} --partition 0` lists them\n"

    producer.commit_transaction(TIMEOUT_S)
    producer.close(5)  # before the broker stops: no reconnect attempts after it
    assert _last_stable_offset(bootstrap) == 5  # h0 h1, abort marker, live, commit marker


def test_abort_with_every_epoch_given_asks_the_broker_nothing_more(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT_S)
    _append_hanging_transaction(pulllog_broker, minutes_ago=1, epoch=2)

    def abort(epoch: int) -> tuple[int, str, str]:
        return _cli("abort", "--topic", TOPIC, "--partition", "0", "--producer-id", str(HANGING_PRODUCER),
                    "--producer-epoch", str(epoch), "--coordinator-epoch", "-1", "--bootstrap-server", bootstrap)

    code, _, err = abort(1)  # older than the producer's epoch: the partition refuses the marker
    assert code == 1 and err.startswith(f"error: cannot abort producer {HANGING_PRODUCER}'s transaction in {TOPIC}-0: "
                                        "epoch 1 is not the producer's current one")
    assert _last_stable_offset(bootstrap) == 0
    code, out, err = abort(2)
    assert code == 0, err
    assert out.strip() == f"aborted producer {HANGING_PRODUCER}'s transaction in {TOPIC}-0"
    assert _last_stable_offset(bootstrap) == 3
