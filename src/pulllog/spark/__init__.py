"""pulllog for Spark: a PySpark data source and the Parquet export behind ``pulllog export``.

    import pulllog.spark
    pulllog.spark.register(spark)
    df = spark.read.format("pulllog").option("topic", "orders").load()

Modules: ``columns`` (the schema and the record decoder), ``offsets`` (offset specs and
ranges), ``wire`` (reading a range over the Kafka protocol, no asyncio needed by callers),
``source`` (the data source), ``export`` (exactly-once incremental Parquet export),
``session`` (starting a local Spark). Only ``source`` and ``session`` import pyspark, so the
``--engine arrow`` export works with pyarrow alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make ``format("pulllog")`` available in ``spark`` (a SparkSession), batch and streaming.

    Set PYSPARK_PYTHON to an interpreter with pulllog installed before the session starts,
    or its Python workers cannot import the reader.
    """
    from .source import PulllogDataSource

    spark.dataSource.register(PulllogDataSource)
