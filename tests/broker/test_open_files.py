"""A broker under a small RLIMIT_NOFILE: partitions bounded by a budget, and an accept loop that backs off.

Each test runs ``pulllog serve`` under ``ulimit -n`` (soft and hard limit).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until, wait_for_listener


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LimitedServe:
    """``pulllog serve`` with RLIMIT_NOFILE = ``nofile`` (soft and hard)."""

    def __init__(self, tmp: Path, nofile: int) -> None:
        self.data, self.port, self.nofile = tmp / "data", free_port(), nofile
        self.log = tmp / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> LimitedServe:
        # `ulimit -n` in a shell that then execs the broker: no preexec_fn in a threaded pytest.
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                ["sh", "-c", f'ulimit -n {self.nofile} && exec "$@"', "sh",
                 sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(self.data),
                 "--listen", f"127.0.0.1:{self.port}"],
                stdout=out, stderr=subprocess.STDOUT)
        wait_for_listener(self.port, self.proc, self.log)
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGKILL) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(sig)
        return self.proc.wait(60)


@pytest.fixture
def limited(tmp_path: Path):
    started: list[LimitedServe] = []

    def start(nofile: int) -> LimitedServe:
        serve = LimitedServe(tmp_path, nofile).start()
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.stop()


def produce_one_each(bootstrap: str, topic: str, partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for p in range(partitions):
        producer.produce(topic, f"record-{p}".encode(), partition=p,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(60) == 0
    assert errors == []


def consume_each(bootstrap: str, topic: str, partitions: int) -> dict[int, bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "fds",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, bytes] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                    eof.add(msg.partition())
                else:
                    got[msg.partition()] = msg.value()
    finally:
        consumer.close()
    return got


def test_more_partitions_than_descriptors_allow_at_three_files_each(limited) -> None:
    # 150 partitions hold 450 segment files; 128 descriptors were enough for about 40 partitions.
    partitions = 150
    serve = limited(128)
    admin = AdminClient({"bootstrap.servers": serve.bootstrap})
    futures = admin.create_topics([NewTopic("many", partitions, 1)], operation_timeout=60)
    futures["many"].result(60)
    produce_one_each(serve.bootstrap, "many", partitions)
    want = {p: f"record-{p}".encode() for p in range(partitions)}
    assert consume_each(serve.bootstrap, "many", partitions) == want
    assert serve.stop(signal.SIGTERM) == 0
    serve.start()  # a clean restart reopens them all under the same limit
    assert consume_each(serve.bootstrap, "many", partitions) == want
    text = serve.log.read_text()
    assert "RLIMIT_NOFILE 128" in text  # the budget is logged at start
    assert "Too many open files" not in text


def test_accept_backs_off_at_the_descriptor_limit_and_resumes(limited) -> None:
    serve = limited(64)
    held: list[socket.socket] = []
    try:
        # More connections than the broker has descriptors for: its accept() gets EMFILE.
        for _ in range(80):
            held.append(socket.create_connection(("127.0.0.1", serve.port)))
        block_until(lambda: "Too many open files" in serve.log.read_text(),
                    "the broker's accept() fails with EMFILE")
    finally:
        for s in held:
            s.close()
    # Descriptors are back: a client is served again.
    admin = AdminClient({"bootstrap.servers": serve.bootstrap})
    block_until(lambda: admin.list_topics(timeout=5).brokers, "the broker answers Metadata again")
    text = serve.log.read_text()
    assert "Traceback" not in text
    assert text.count("cannot accept connections") <= 2  # once per interval, not once per failure
