"""Shared fixtures. Tests start real brokers and real clients; nothing here mocks them."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import kafka_reference

# The 3-node clusters of tests/cluster_clients (started only when a test asks for them).
pytest_plugins = ("cluster_clients.cluster_fixtures",)

# Hypothesis's per-example deadline is a timing assertion: on two shared cores a busy moment
# fails it with nothing wrong. Property tests check behaviour; benchmarks measure speed.
settings.register_profile("pulllog", deadline=None)
settings.load_profile("pulllog")


@pytest.fixture(scope="session")
def kafka_reference_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_reference.KafkaReference]:
    """The reference broker: Apache Kafka itself, started once per test session, stopped by PID.

    Skips (with the reason) only when Java or Maven is missing; scripts/test.sh installs both,
    so CI runs these tests. Jars come from Maven into a cache outside the repository
    (scripts/kafka_reference.py)."""
    why = kafka_reference.missing_tools()
    if why:
        pytest.skip(why)
    ref = kafka_reference.start_reference(tmp_path_factory.mktemp("kafka-reference"))
    try:
        yield ref
    finally:
        ref.stop()
