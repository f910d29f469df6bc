"""One real local Spark for the whole test run (10-15 s of JVM start-up), stopped at the end.

PYSPARK_PYTHON is set to this interpreter before Spark starts, or its Python workers could not
import pulllog. Helpers shared by the tests are in ``spark_helpers``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[str] | str:
    """Spark's own Kafka source (spark-sql-kafka-0-10), fetched with Maven: its jars, or why
    they cannot be had here (no Maven)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import kafka_reference

    try:
        return [str(p) for p in kafka_reference.fetch_spark_kafka_jars()]
    except kafka_reference.ReferenceUnavailable as exc:
        return str(exc)


@pytest.fixture(scope="session")
def spark(spark_kafka_jars: list[str] | str) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pulllog.spark.session import start

    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if isinstance(spark_kafka_jars, list):
        conf["spark.jars"] = ",".join(spark_kafka_jars)
    session = start("local[2]", conf, app_name="pulllog-tests")
    yield session
    session.stop()


@pytest.fixture
def kafka_source(spark: Any, spark_kafka_jars: list[str] | str) -> Any:
    """The session, when Spark's Kafka source is on its class path."""
    if isinstance(spark_kafka_jars, str):
        pytest.skip(spark_kafka_jars)
    return spark
