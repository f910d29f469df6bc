"""Offsets in a transaction when the broker is SIGKILLed between the transaction's markers.

The transaction writes one record to a data partition and commits a group's offset
(AddOffsetsToTxn, TxnOffsetCommit); the broker dies after the first of its two markers
(tests/txn/crash_broker.py), so either the data partition or ``__consumer_offsets`` has its
marker and the other has not (both cases). At the next start the offsets are pending again (replay) until
the transaction coordinator completes the transaction: then the group's offset is the
transaction's on commit, the old one on abort, as the records' visibility says.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import wait_for_listener

from pulllog.net.coordinator_keys import partition_for
from pulllog.records import build_batch
from pulllog.records.batch import iter_batches
from pulllog.testing import BrokerThread

CRASH_BROKER = Path(__file__).parent.parent / "txn" / "crash_broker.py"
GROUP, TXN_ID = "billing", "offsets-crash-tx"
# The coordinator writes markers in partition order: "Input" sorts before "__consumer_offsets"
# (its marker is written and the offsets' is not), "input" after (the offsets are marked, the
# record is not).
DATA_FIRST, OFFSETS_FIRST = "Input", "input"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _markers(log_dir: Path) -> int:
    """Control batches in one partition's segment files, read raw (opening a Log would run
    recovery before the broker does)."""
    return sum(header.is_control for segment in sorted(log_dir.glob("*.log"))
               for _pos, header in iter_batches(segment.read_bytes()))


def _fetch_offset(c: WireClient, topic: str) -> tuple[int, ErrorCode]:
    answer = c.call("offset_fetch", 7, {"group_id": GROUP, "topics": [{"name": topic, "partition_indexes": [0]}],
                                        "require_stable": True})
    p = answer.topics[0].partitions[0]
    return int(p.committed_offset), p.error_code


def _run_transaction_and_crash(c: WireClient, topic: str, commit: bool) -> None:
    created = c.call("create_topics", 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": [], "configs": []}],
                                          "timeout": 30_000, "validate_only": False})
    assert created.topics[0].error_code == 0
    committed = c.call("offset_commit", 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    assert committed.topics[0].partitions[0].error_code == 0
    init = c.call("init_producer_id", 4, {"transactional_id": TXN_ID, "transaction_timeout": 60_000,
                                          "producer_id": -1, "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    ids = {"v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch}
    c.call("add_partitions_to_txn", 3, {**ids, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    batch = build_batch([(None, b"out")], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    produced = c.call("produce", 9, {"transactional_id": TXN_ID, "acks": -1, "timeout": 5000,
                                     "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert produced.responses[0].partition_responses[0].error_code == 0
    added = c.call("add_offsets_to_txn", 3, {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
                                             "group_id": GROUP})
    assert added.error_code == 0
    offsets = c.call("txn_offset_commit", 3, {
        "transactional_id": TXN_ID, "group_id": GROUP, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    assert offsets.topics[0].partitions[0].error_code == 0
    assert _fetch_offset(c, topic) == (-1, ErrorCode.unstable_offset_commit)
    with pytest.raises(ConnectionError):  # the broker dies after the first marker
        c.call("end_txn", 3, {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
                              "committed": commit})


@pytest.mark.parametrize("topic", [DATA_FIRST, OFFSETS_FIRST])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_broker_killed_between_markers_settles_the_offsets_at_restart(tmp_path: Path, commit: bool,
                                                                        topic: str) -> None:
    data_dir, port = tmp_path / "data", _free_port()
    log_file = tmp_path / "crash-broker.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(CRASH_BROKER), str(data_dir), str(port), "1"],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for_listener(port, proc, log_file)
        with WireClient(port) as c:
            _run_transaction_and_crash(c, topic, commit)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    offsets_dir = data_dir / f"__consumer_offsets-{partition_for(GROUP, 50)}"
    marked = (_markers(data_dir / f"{topic}-0"), _markers(offsets_dir))
    assert marked == ((1, 0) if topic == DATA_FIRST else (0, 1))

    with BrokerThread(data_dir) as broker, WireClient(broker.port) as c:
        # The restart completes the transaction before the broker listens.
        assert _fetch_offset(c, topic) == ((9, ErrorCode.none) if commit else (1, ErrorCode.none))

        def latest(isolation_level: int) -> int:
            listed = c.call("list_offsets", 7, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            return int(listed.topics[0].partitions[0].offset)

        # Nothing left open (the marked partition may get a second marker: harmless, as in Kafka).
        assert latest(1) == latest(0) >= 2
