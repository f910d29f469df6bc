"""One real local Spark for the whole test run (10-15 s of JVM start-up), stopped at the end.

PYSPARK_PYTHON is set to this interpreter before Spark starts, or its Python workers could not
import pulllog. Helpers shared by the tests are in ``spark_helpers``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pulllog.spark.session import start

    session = start("local[2]", {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }, app_name="pulllog-tests")
    yield session
    session.stop()
