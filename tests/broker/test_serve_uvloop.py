"""`pulllog serve --loop uvloop`: the same broker on uvloop (which has no sendfile)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
from waits import wait_for_listener

pytest.importorskip("uvloop")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_produce_and_fetch_work_on_uvloop(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pulllog.cli.main", "serve", "--loop", "uvloop",
                                 "--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_listener(port, proc, log)
        bootstrap = f"127.0.0.1:{port}"
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        for i in range(1000):
            producer.produce("on-uvloop", b"value %d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "uv",
                                             "enable.auto.commit": False})
        consumer.assign([confluent_kafka.TopicPartition("on-uvloop", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(1000, 1.0) if m.error() is None]
        consumer.close()

        assert got == [b"value %d" % i for i in range(1000)]
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in log.read_text()
