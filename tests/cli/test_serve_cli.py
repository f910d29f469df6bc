"""`pulllog serve` with a new user's configuration: a stock Kafka server.properties starts it
with one warning per setting that does not apply; mistakes are one line naming the culprit."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pulllog.broker.config import BrokerConfig, ConfigError

PULLLOG = [sys.executable, "-m", "pulllog.cli.main"]

# The settings of the server.properties files Kafka ships (ZooKeeper mode and KRaft mode),
# with values as found there; log.dirs and the listeners are the test's own.
STOCK_KAFKA = {
    "broker.id": "0",
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "num.partitions": "1",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
    "group.initial.rebalance.delay.ms": "0",
}
IGNORED = {"process.roles", "controller.quorum.voters", "inter.broker.listener.name", "controller.listener.names",
           "listener.security.protocol.map", "num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
           "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
           "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_error(*args: str) -> tuple[int, list[str]]:
    """Run `pulllog serve` expecting it to refuse before listening; its stderr lines."""
    result = subprocess.run([*PULLLOG, "serve", *args], capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, result.stderr.splitlines()


def test_a_stock_kafka_server_properties_starts_with_one_warning_per_ignored_setting(tmp_path: Path) -> None:
    port = free_port()
    props = tmp_path / "server.properties"
    lines = [f"{k}={v}" for k, v in STOCK_KAFKA.items()]
    lines += [f"log.dirs={tmp_path / 'data'}", f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://:9093",
              f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}"]
    props.write_text("# as Kafka ships it\n" + "\n".join(lines) + "\n")
    proc = subprocess.Popen([*PULLLOG, "serve", "--config", str(props)], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        warnings = []
        for line in proc.stderr:
            if line.startswith("pulllog broker ready"):
                break
            if line.startswith("warning: "):
                warnings.append(line)
        assert f"bootstrap.servers=127.0.0.1:{port}" in line
        warned = [w.split(" ", 2)[2].split("=", 1)[0] for w in warnings]  # "warning: ignoring NAME=VALUE: why"
        assert sorted(warned) == sorted(IGNORED)  # one line each, nothing else
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_ignored_settings_say_why_and_leave_the_config_as_pulllogs_defaults() -> None:
    config = BrokerConfig.load({"num.network.threads": "3", "zookeeper.set.acl": "true",
                                "ssl.keystore.location": "/etc/ks.jks"})
    assert config == BrokerConfig()
    assert [str(s) for s in config.ignored] == [
        "ignoring num.network.threads=3: pulllog serves every connection on one event loop: there are no thread pools",
        ("ignoring zookeeper.set.acl=true: pulllog's cluster uses zookeeper.connect and its two timeouts only "
         "(no TLS, SASL or ACLs)"),
        ("ignoring ssl.keystore.location=/etc/ks.jks: pulllog has no security (PLAINTEXT only): no TLS, SASL, ACLs "
         "or delegation tokens"),
    ]


@pytest.mark.parametrize("name, suggestion", [
    ("num.partiton", "num.partitions"),
    ("log.retention.hour", "log.retention.hours"),
    ("num.netwrok.threads", "num.network.threads"),
])
def test_a_name_neither_pulllog_nor_kafka_knows_is_refused_with_the_closest_one(name: str, suggestion: str) -> None:
    from pulllog.broker.config import KNOWN_NAMES

    with pytest.raises(ConfigError) as err:
        BrokerConfig.load({name: "1"})
    assert str(err.value) == f"unknown broker config {name!r}; did you mean {suggestion!r}?"
    assert suggestion in KNOWN_NAMES


def test_an_unknown_override_is_one_line_with_a_suggestion(tmp_path: Path) -> None:
    code, lines = serve_error("--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--override", "num.partiton=3")
    assert code == 2 and lines == ["error: unknown broker config 'num.partiton'; did you mean 'num.partitions'?"]


def test_a_bad_broker_log_value_names_the_broker_setting_not_the_topic_one(tmp_path: Path) -> None:
    code, lines = serve_error("--data-dir", str(tmp_path), "--listen", "127.0.0.1:0",
                              "--override", "message.max.bytes=-1")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: message.max.bytes=-1: ") and "max.message.bytes" not in lines[0]


def test_a_data_dir_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    code, lines = serve_error("--data-dir", "/proc/x", "--listen", "127.0.0.1:0")
    assert code == 2 and len(lines) == 1 and "/proc/x" in lines[0] and "cannot create" in lines[0]


def test_a_listen_host_that_does_not_resolve_says_so(tmp_path: Path) -> None:
    code, lines = serve_error("--data-dir", str(tmp_path), "--listen", "nohost.invalid:1")
    assert code == 2 and len(lines) == 1
    assert "'nohost.invalid' does not resolve" in lines[0] and "another broker" not in lines[0]


def test_the_log_is_plain_timestamped_lines_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    # rich lays a record out to the console's width (~1 ms a line on the broker's loop): on a
    # pipe or a file the lines are Kafka's log4j layout instead, "[date time,ms] LEVEL message (logger)".
    proc = subprocess.Popen([*PULLLOG, "serve", "--data-dir", str(tmp_path / "data"), "--listen",
                             f"127.0.0.1:{free_port()}", "--log-level", "info"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            if line.startswith("pulllog broker ready"):
                break
        proc.terminate()
        out, _err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    lines = out.splitlines()
    assert any("SIGTERM received: shutting down cleanly (pulllog.broker)" in line for line in lines), out
    plain = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S.* \(pulllog[.\w]*\)$")
    assert all(plain.match(line) for line in lines), out
