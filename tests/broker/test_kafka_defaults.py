"""Kafka's default group.initial.rebalance.delay.ms (3000 ms) for `pulllog serve`; 0 for a
broker built in code (BrokerThread, the pytest fixtures), so that test groups form at once."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from kafka_wire import WireClient

from pulllog.broker.config import KAFKA_DEFAULTS, BrokerConfig
from pulllog.testing import BrokerThread

DELAY = "group.initial.rebalance.delay.ms"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _described_delay(port: int) -> str:
    with WireClient(port) as c:
        answer = c.call("describe_configs", 4, {
            "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": [DELAY]}],
            "include_synonyms": False, "include_documentation": False})
    (config,) = answer.results[0].configs
    return str(config.value)


def test_loading_with_kafka_defaults_gives_kafkas_delay_and_a_given_value_wins(tmp_path: Path) -> None:
    assert KAFKA_DEFAULTS[DELAY] == "3000"
    assert BrokerConfig.load(kafka_defaults=True).group_initial_rebalance_delay_ms == 3000
    assert BrokerConfig.load().group_initial_rebalance_delay_ms == 0
    assert BrokerConfig.load({DELAY: "0"}, kafka_defaults=True).group_initial_rebalance_delay_ms == 0
    props = tmp_path / "server.properties"
    props.write_text(f"{DELAY}=250\n")
    assert BrokerConfig.load(config_file=props, kafka_defaults=True).group_initial_rebalance_delay_ms == 250


def test_a_broker_thread_keeps_no_delay(tmp_path: Path) -> None:
    broker = BrokerThread(tmp_path, port=0).start()
    try:
        assert _described_delay(broker.port) == "0"
    finally:
        broker.stop()


def test_pulllog_serve_waits_kafkas_3000_ms_for_a_new_group(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(tmp_path),
                             "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("pulllog broker ready"):
                break
        assert _described_delay(port) == "3000"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
