"""An open transaction survives a broker's SIGKILL and a clean restart: its first offset holds
the last stable offset, from the producer snapshot or from replaying the log, and a later
abort marker hides its data from read_committed consumers (pulllog's wire and librdkafka)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka_wire import WireClient
from txn_helpers import read_values
from waits import TIMEOUT_S

from pulllog.records.batch import iter_batches
from pulllog.testing import BrokerThread

TOPIC = "txn-crash"

# A broker (in a thread of this process) whose partition gets: p0 (offset 0), producer 7's
# transactional t1, t2 (1-2), then p3 (3) and t3 (4). With "snapshot" the segment rolls
# after t2: the transaction's start is then below the roll's producer snapshot, which alone
# can say it is open. No marker is ever written; the test SIGKILLs this process.
WRITER = """
import sys, time
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

data_dir, mode = sys.argv[1], sys.argv[2]
b = BrokerThread(data_dir).start()
b.call(b.broker.auto_create_topic, "%s")
log = b.call(lambda: b.broker.topics.topics["%s"].partitions[0].log)
seq = [0]

def plain(value):
    b.call(log.append, build_batch([(None, value)]))

def txn(*values):
    b.call(log.append, build_batch([(None, v) for v in values], producer_id=7, producer_epoch=0,
                                   base_sequence=seq[0], transactional=True))
    seq[0] += len(values)

plain(b"p0")
txn(b"t1", b"t2")
if mode == "snapshot":
    b.call(log.roll)
plain(b"p3")
txn(b"t3")
print("ready", flush=True)
time.sleep(600)
""" % (TOPIC, TOPIC)


def fetch_committed(port: int, offset: int = 0) -> Any:
    with WireClient(port) as c:
        resp = c.call("fetch", 12, {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}],
        })
    return resp.responses[0].partitions[0]


def offsets_in(part: Any) -> list[int]:
    return [h.base_offset for _pos, h in iter_batches(bytes(part.records or b""))]


def partition_log(broker: BrokerThread) -> Any:
    return broker.call(lambda: broker.broker.topics.topics[TOPIC].partitions[0].log)


def abort(broker: BrokerThread) -> int:
    offset = broker.call(partition_log(broker).write_txn_marker, 7, 0, False, 0)
    broker.call(broker.broker.on_append, TOPIC, 0)
    return offset


def run_writer_and_sigkill(data_dir: Path, mode: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(data_dir), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "the writer did not get its transaction in"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(TIMEOUT_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", ["replay", "snapshot"])
def test_an_open_transaction_survives_sigkill_and_a_later_abort_hides_it(tmp_path: Path, mode: str) -> None:
    data_dir = tmp_path / "data"
    run_writer_and_sigkill(data_dir, mode)
    partition_dir = data_dir / f"{TOPIC}-0"
    if mode == "snapshot":
        assert (partition_dir / f"{3:020d}.snapshot").exists(), "the roll's snapshot, with t1's transaction open"
    with BrokerThread(data_dir) as broker:
        assert not partition_log(broker).recovery.clean
        part = fetch_committed(broker.port)
        assert (part.high_watermark, part.last_stable_offset) == (5, 1)
        assert offsets_in(part) == [0]
        marker = abort(broker)
        assert marker == 5
        part = fetch_committed(broker.port)
        assert part.last_stable_offset == 6
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 1)]
        assert read_values(broker.bootstrap_servers, TOPIC, expect=2) == [b"p0", b"p3"]
    # And after a clean restart the abort is still known (the .txnindex) and nothing is open.
    with BrokerThread(data_dir) as broker:
        part = fetch_committed(broker.port)
        assert part.last_stable_offset == part.high_watermark == 6
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 1)]
        assert read_values(broker.bootstrap_servers, TOPIC, expect=2) == [b"p0", b"p3"]


def test_an_open_transaction_survives_a_clean_restart(tmp_path: Path) -> None:
    from pulllog.records import build_batch

    data_dir = tmp_path / "data"
    with BrokerThread(data_dir) as broker:
        broker.call(broker.broker.auto_create_topic, TOPIC)
        log = partition_log(broker)
        broker.call(log.append, build_batch([(None, b"p0")]))
        broker.call(log.append, build_batch([(None, b"t1")], producer_id=7, producer_epoch=0, base_sequence=0,
                                            transactional=True))
    with BrokerThread(data_dir) as broker:
        assert partition_log(broker).recovery.clean
        part = fetch_committed(broker.port)
        assert (part.high_watermark, part.last_stable_offset) == (2, 1)
        abort(broker)
        assert read_values(broker.bootstrap_servers, TOPIC, expect=1) == [b"p0"]
        assert fetch_committed(broker.port).last_stable_offset == 3
