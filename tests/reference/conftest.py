"""Fixtures of the reference tests. The reference broker itself, Apache Kafka started once per
test session (``kafka_reference_broker``), is in tests/conftest.py: tests/spark uses it too.

Skips (with the reason) only when Java or Maven is missing; scripts/test.sh installs both, so
CI runs these tests. Jars come from Maven into a cache outside the repository
(scripts/kafka_reference.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import kafka_reference  # noqa: E402

from pulllog.testing import BrokerThread  # noqa: E402


@pytest.fixture(scope="session")
def pulllog_session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """A pulllog broker configured as the reference one is (auto-create on, one partition)."""
    broker = BrokerThread(tmp_path_factory.mktemp("pulllog"), port=0).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """A pulllog broker per test module for Kafka's Java client and tools (which need the jars)."""
    why = kafka_reference.missing_tools()
    if why:
        pytest.skip(why)
    kafka_reference.fetch_jars()
    with BrokerThread(tmp_path_factory.mktemp("pulllog-for-java")) as b:
        yield b
