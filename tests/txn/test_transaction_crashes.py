"""Crashes in the middle of a transaction (issue 14's crash tests).

* The broker SIGKILLed between markers: one partition has its commit (or abort) marker, the
  others do not, and ``__transaction_state`` says PrepareCommit (PrepareAbort). At the next
  start the coordinator writes the missing markers before the broker listens, so a
  read_committed consumer never sees part of the transaction.
* The producer SIGKILLed with a transaction open: the coordinator aborts it once
  ``transaction.timeout.ms`` has passed, and the partitions' last stable offset moves on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from txn_helpers import read_values, txn_state

from pulllog.records import build_batch
from pulllog.records.batch import RecordBatch, iter_batches
from pulllog.records.control import ControlType, read_control_record
from pulllog.testing import BrokerThread
from waits import block_until, on_broker, wait_for_listener

HERE = Path(__file__).parent
TOPIC, PARTITIONS = "crash", 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _markers(log_dir: Path) -> list[ControlType]:
    """The control records in one partition's segment files, read raw (no Log: opening one
    would run recovery before the broker does)."""
    found = []
    for segment in sorted(log_dir.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            if header.is_control:
                record = read_control_record(RecordBatch.from_bytes(data, pos))
                assert record is not None
                found.append(ControlType(record.type))
    return found


def _open_transaction(c: WireClient, transactional_id: str) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn for every partition and one record in each."""
    init = c.call("init_producer_id", 4, {"transactional_id": transactional_id, "transaction_timeout": 60_000,
                                          "producer_id": -1, "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    c.call("add_partitions_to_txn", 3, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(range(PARTITIONS))}]})
    for p in range(PARTITIONS):
        batch = build_batch([(None, f"value-{p}".encode())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            transactional=True)
        topic_data = [{"name": TOPIC, "partition_data": [{"index": p, "records": batch}]}]
        resp = c.call("produce", 9, {"transactional_id": transactional_id, "acks": -1, "timeout": 5000,
                                     "topic_data": topic_data})
        assert resp.responses[0].partition_responses[0].error_code == 0
    return pid, epoch


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_broker_killed_between_markers_completes_the_transaction_at_restart(tmp_path: Path, commit: bool) -> None:
    data_dir, port = tmp_path / "data", _free_port()
    log_file = tmp_path / "crash-broker.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(HERE / "crash_broker.py"), str(data_dir), str(port), "1"],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for_listener(port, proc, log_file)
        with WireClient(port) as c:
            created = c.call("create_topics", 7, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                                             "replication_factor": 1, "assignments": [],
                                                             "configs": []}], "timeout": 30_000,
                                                  "validate_only": False})
            assert created.topics[0].error_code == 0
            pid, epoch = _open_transaction(c, "crash-tx")
            with pytest.raises(ConnectionError):  # the broker dies after the first marker
                c.call("end_txn", 3, {"transactional_id": "crash-tx", "producer_id": pid, "producer_epoch": epoch,
                                      "committed": commit})
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    expected = ControlType.COMMIT if commit else ControlType.ABORT
    marked = [_markers(data_dir / f"{TOPIC}-{p}") for p in range(PARTITIONS)]
    assert sorted(marked) == [[], [], [expected]]  # partial: one partition has its marker

    first_marked = next(p for p in range(PARTITIONS) if marked[p])
    with BrokerThread(data_dir) as broker:  # the restart completes it before it listens
        assert txn_state(broker, "crash-tx") == ("CompleteCommit" if commit else "CompleteAbort")
        assert read_values(broker.bootstrap_servers, TOPIC, PARTITIONS) == \
            ([f"value-{p}".encode() for p in range(PARTITIONS)] if commit else [])
        with WireClient(broker.port) as c:
            for p in range(PARTITIONS):
                # record, marker (and the partition marked before the crash: its second marker)
                end = 3 if p == first_marked else 2
                assert _read_committed_fetch(c, p) == (end, end, [(pid, 0)] if not commit else [])
    # The coordinator cannot know which markers were written before the crash, so the restart
    # writes them all, as Kafka's does: the marked partition has a second one. It ends no
    # transaction (the producer has none open), so it moves no LSO and indexes no aborted
    # transaction (above: read_committed reads to the log end, one aborted transaction).
    for p in range(PARTITIONS):
        assert _markers(data_dir / f"{TOPIC}-{p}") == [expected] * (2 if p == first_marked else 1)


def _read_committed_fetch(c: WireClient, partition: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(high watermark, last stable offset, aborted transactions) of a read_committed Fetch
    from offset 0."""
    resp = c.call("fetch", 12, {
        "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                     "partition_max_bytes": 1 << 20}]}]})
    answer = resp.responses[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    aborted = [(int(a.producer_id), int(a.first_offset)) for a in answer.aborted_transactions or ()]
    return int(answer.high_watermark), int(answer.last_stable_offset), aborted


def test_a_producer_killed_mid_transaction_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    properties = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100", "num.partitions": "2"}
    with BrokerThread(tmp_path / "data", properties=properties) as broker:
        bootstrap = broker.bootstrap_servers
        proc = subprocess.Popen([sys.executable, str(HERE / "txn_producer.py"), bootstrap, "orphan", "orphan-tx",
                                 "2000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"sent\n"
            assert txn_state(broker, "orphan-tx") == "Ongoing"

            def stable(b: Any) -> bool:
                logs = b.topics.partition_logs("orphan")
                return all(log.last_stable_offset == log.log_end_offset for log in logs)

            assert not on_broker(broker, stable)  # the open transaction holds the LSO back
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        block_until(lambda: txn_state(broker, "orphan-tx") == "CompleteAbort",
                    "the coordinator aborts the transaction past its timeout")
        assert on_broker(broker, stable)
        assert read_values(bootstrap, "orphan", 2) == []
        with WireClient(broker.port) as c:
            described = c.call("describe_transactions", 0, {"transactional_ids": ["orphan-tx"]})
            assert described.transaction_states[0].error_code == ErrorCode.none
