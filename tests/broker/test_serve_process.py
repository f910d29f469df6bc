"""`pulllog serve` as a real process: SIGKILL loses nothing acknowledged; SIGTERM and SIGINT are clean."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
from waits import wait_for_listener

from pulllog.log.checkpoint import read_offsets
from pulllog.log.clean_shutdown import CLEAN_SHUTDOWN_MARKER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    def __init__(self, data_dir: Path, port: int, overrides: tuple[str, ...] = ()) -> None:
        self.data_dir, self.port = data_dir, port
        self.overrides = overrides
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"serve-{port}.log"

    def start(self) -> "ServeProcess":
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(self.data_dir),
             "--listen", f"127.0.0.1:{self.port}", "--override", "num.partitions=3",
             *(arg for o in self.overrides for arg in ("--override", o))],
            stdout=out, stderr=subprocess.STDOUT)
        wait_for_listener(self.port, self.proc, self.log)
        return self

    def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def serve(tmp_path: Path):
    procs: list[ServeProcess] = []

    def start(port: int | None = None, overrides: tuple[str, ...] = ()) -> ServeProcess:
        p = ServeProcess(tmp_path / "data", port or free_port(), overrides).start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


def consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            got[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    assert len(eof) == partitions, "did not reach the end of every partition"
    return got


@pytest.mark.parametrize("acks", ["1", "all"])
def test_sigkill_mid_produce_loses_nothing_acknowledged(serve, acks: str) -> None:
    broker = serve()
    bootstrap = f"127.0.0.1:{broker.port}"
    acked: dict[int, dict[int, bytes]] = {0: {}, 1: {}, 2: {}}

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[msg.partition()][msg.offset()] = msg.value()

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2,
                                         "message.timeout.ms": 5000, "retries": 0})
    i = 0
    while sum(len(v) for v in acked.values()) < 30_000 and i < 300_000:
        try:
            producer.produce("killed", b"message-%d" % i, key=b"%d" % (i % 97), on_delivery=on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    assert broker.signal(signal.SIGKILL) == -signal.SIGKILL
    producer.flush(10)  # in-flight messages fail: they were never acknowledged
    total_acked = sum(len(v) for v in acked.values())
    assert total_acked >= 30_000

    serve(broker.port)  # restart on the same data dir: recovery runs
    got = consume_all(bootstrap, "killed", 3)
    for partition, messages in got.items():
        offsets = [o for o, _ in messages]
        assert offsets == list(range(len(offsets))), f"gap or reorder in partition {partition}"
        stored = dict(messages)
        for offset, value in acked[partition].items():
            assert stored.get(offset) == value, f"acknowledged {partition}@{offset} is missing"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_shuts_down_cleanly_and_restart_needs_no_recovery(serve, sig: signal.Signals) -> None:
    broker = serve()
    bootstrap = f"127.0.0.1:{broker.port}"
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(1000):
        producer.produce("clean", b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    assert broker.signal(sig) == 0
    log_text = broker.log.read_text()
    assert "stopped cleanly" in log_text
    assert ("clean", 0) in read_offsets(broker.data_dir / CLEAN_SHUTDOWN_MARKER)
    again = serve(broker.port)
    assert not (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()  # taken at start: a crash now is a crash
    got = consume_all(bootstrap, "clean", 3)
    assert [v for _, v in got[0]] == [b"%d" % i for i in range(1000)]
    assert "recovered after unclean shutdown" not in again.log.read_text()


def test_serve_refuses_a_port_in_use_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir",
                                 str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "cannot listen" in result.stderr and "Traceback" not in result.stderr
