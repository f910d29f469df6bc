"""`pulllog serve` refuses a start that would hide data or share a live data directory.

Real processes and a real client (librdkafka): issue 12's data-loss reproduction end to end,
and two brokers on one data directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from test_serve_process import ServeProcess, consume_all, free_port


@pytest.fixture
def started():
    """Start ``pulllog serve`` processes; each is killed by PID at the end if still running."""
    procs: list[ServeProcess] = []

    def start(data: Path, port: int, overrides: tuple[str, ...] = ()) -> ServeProcess:
        proc = ServeProcess(data, port, overrides)
        procs.append(proc)
        return proc.start()

    yield start
    for proc in procs:
        proc.stop()


def serve_once(data: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``pulllog serve`` expecting it to refuse to start (a start that serves times out)."""
    return subprocess.run([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(data),
                           "--listen", f"127.0.0.1:{port}", *extra],
                          capture_output=True, text=True, timeout=30)


def produce_acked(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[msg.partition()].append(msg.value())

    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, b"%d-%d" % (p, i), partition=p, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    return acked


def test_a_broken_partition_refuses_the_start_and_a_degraded_start_takes_only_it_offline(
        tmp_path: Path, started) -> None:
    data, port = tmp_path / "data", free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = started(data, port)  # num.partitions=3
    acked = produce_acked(bootstrap, "orders", 3, 700)
    assert broker.signal(signal.SIGTERM) == 0
    meta = (data / "topics" / "orders.json").read_bytes()

    (timeindex,) = (data / "orders-1").glob("*.timeindex")
    shutil.move(timeindex, tmp_path / "saved.timeindex")
    timeindex.mkdir()  # opening the partition now fails with an OS error

    refused = serve_once(data, port)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    (line,) = [x for x in refused.stderr.splitlines() if "orders" in x]
    assert str(timeindex) in line and "Is a directory" in line
    assert (data / "topics" / "orders.json").read_bytes() == meta

    degraded = started(data, port, ("start.with.offline.partitions=true",))
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000})
    outcomes: dict[int, object] = {}
    for partition in (1, 0):
        producer.produce("orders", b"after the fault", partition=partition,
                         on_delivery=lambda err, msg, p=partition: outcomes.__setitem__(p, err))
    producer.flush(30)
    assert outcomes[1] is not None, "a produce to an offline partition must not be acknowledged"
    assert outcomes[0] is None, "only the partition that failed is offline"
    acked[0].append(b"after the fault")
    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics("orders", timeout=10).topics["orders"].partitions
    assert sorted(partitions) == [0, 1, 2]
    assert {i: p.leader for i, p in partitions.items()} == {0: 0, 1: -1, 2: 0}
    assert degraded.signal(signal.SIGTERM) == 0
    assert (data / "topics" / "orders.json").read_bytes() == meta, "the topic with an offline partition was re-described"

    timeindex.rmdir()
    shutil.move(tmp_path / "saved.timeindex", timeindex)
    started(data, port)
    got = consume_all(bootstrap, "orders", 3)
    assert {p: [v for _, v in msgs] for p, msgs in got.items()} == acked


def test_a_second_broker_on_a_live_data_dir_refuses_at_once_and_touches_nothing(tmp_path: Path, started) -> None:
    data = tmp_path / "data"
    first = started(data, free_port())
    producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{first.port}"})
    producer.produce("live", b"x", partition=0)
    assert producer.flush(30) == 0
    before = snapshot(data)

    second = serve_once(data, free_port())
    assert second.returncode != 0
    assert "Traceback" not in second.stderr
    assert f"pid {first.proc.pid}" in second.stderr, second.stderr
    assert "recover" not in second.stderr
    assert snapshot(data) == before
    assert first.proc.poll() is None


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out
