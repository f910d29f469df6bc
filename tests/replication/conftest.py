"""The ``cluster`` fixture: three brokers and the in-test controller of replica_cluster.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from replica_cluster import TestController


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[TestController]:
    marker = request.node.get_closest_marker("broker_properties")
    properties = {"replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "50",
                  "log.flush.scheduler.interval.ms": "50", **(marker.args[0] if marker else {})}
    controller = TestController(tmp_path, properties)
    try:
        for broker_id in (1, 2, 3):
            await controller.start(broker_id)
        yield controller
    finally:
        with contextlib.suppress(Exception):
            await controller.stop_all()


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "broker_properties(props): server.properties for the test's brokers")
