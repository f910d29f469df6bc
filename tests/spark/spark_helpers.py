"""Helpers for the Spark tests: records produced with librdkafka, and the four Parquet readers
the export promises to be correct for (Spark, pyarrow, DuckDB, pandas), reduced to one shape.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import duckdb
import pandas as pd
import pyarrow.parquet as pq

# (partition, offset, key, value, headers): what "exactly the produced records" compares
Row = tuple[int, int, "bytes | None", "bytes | None", tuple[tuple[str, "bytes | None"], ...]]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


# ---------------------------------------------------------------------------- producing


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, *, partitions: int, start: int = 0,
            codecs: Iterable[str] = CODECS, value_size: int | None = None,
            timestamp_ms: int | None = None, timestamps: dict[tuple[int, int], int] | None = None) -> list[Row]:
    """Produce ``n`` records spread over partitions and codecs (one producer per codec); return
    them as the broker placed them (from the delivery reports). ``timestamps``, if given, is
    filled with each record's timestamp in ms; ``timestamp_ms`` sets them (plus the record's
    sequence number) instead of the producer's clock.

    Every 7th record has no key, every 3rd has headers (one with a null value), every 11th has
    a null value (a tombstone).
    """
    delivered: list[Row] = []
    codecs = list(codecs)
    for c, codec in enumerate(codecs):
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                             "linger.ms": 20, "enable.idempotence": False})

        def report(sent: tuple[Any, ...], err: Any, msg: Any) -> None:
            # the delivery report says where a record landed, not its headers: take what was sent
            assert err is None, err
            delivered.append((msg.partition(), msg.offset(), *sent))
            if timestamps is not None:
                timestamps[(msg.partition(), msg.offset())] = msg.timestamp()[1]

        for i in range(start + c, start + n, len(codecs)):
            key = None if i % 7 == 0 else f"key-{i}".encode()
            if i % 11 == 0:
                value = None
            elif value_size is not None:
                value = (f"{i}:" + "x" * value_size).encode()[:value_size]
            else:
                value = f"value-{i}-{codec}".encode()
            headers = [("seq", str(i).encode()), ("empty", None)] if i % 3 == 0 else None
            kwargs = {} if timestamp_ms is None else {"timestamp": timestamp_ms + i}
            sent = (key, value, tuple(headers or ()))
            producer.produce(topic, key=key, value=value, partition=i % partitions, headers=headers,
                             on_delivery=functools.partial(report, sent), **kwargs)
            if i % 5000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
    assert len(delivered) == n
    return delivered


# ---------------------------------------------------------------------------- reading back


def _headers(value: Any) -> tuple[tuple[str, bytes | None], ...]:
    out = []
    for h in value if value is not None else ():
        k, v = (h["key"], h["value"]) if isinstance(h, dict) else (h[0], h[1])
        out.append((k, None if v is None else bytes(v)))
    return tuple(out)


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def read_spark(spark: Any, out: Path) -> list[Row]:
    df = spark.read.parquet(str(out)).select("partition", "offset", "key", "value", "headers")
    return [(int(r[0]), int(r[1]), _b(r[2]), _b(r[3]), _headers(r[4])) for r in df.collect()]


def read_pyarrow(out: Path) -> list[Row]:
    table = pq.read_table(out)  # hive partitioning inferred: topic=, partition= become columns
    cols = table.select(["partition", "offset", "key", "value", "headers"]).to_pydict()
    return [(int(p), o, k, v, _headers(h)) for p, o, k, v, h in
            zip(cols["partition"], cols["offset"], cols["key"], cols["value"], cols["headers"])]


def read_duckdb(out: Path) -> list[Row]:
    rows = duckdb.sql(f"select partition, \"offset\", key, value, headers from "
                      f"read_parquet('{out}/**/*.parquet', hive_partitioning = true)").fetchall()
    return [(int(p), o, _b(k), _b(v), _headers(h)) for p, o, k, v, h in rows]


def read_pandas(out: Path) -> list[Row]:
    df = pd.read_parquet(out)
    return [(int(p), int(o), _b(k), _b(v), _headers(h)) for p, o, k, v, h in
            zip(df["partition"], df["offset"], df["key"], df["value"], df["headers"])]


def assert_exactly(rows: list[Row], expected: Iterable[Row], reader: str) -> None:
    """No duplicate, no gap, nothing else: ``rows`` is ``expected`` as a set and has no repeats."""
    expected = list(expected)
    dupes = [k for k, n in collections.Counter((r[0], r[1]) for r in rows).items() if n > 1]
    assert not dupes, f"{reader}: duplicated (partition, offset): {sorted(dupes)[:10]}"
    got = {(r[0], r[1]): r for r in rows}
    want = {(r[0], r[1]): r for r in expected}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"{reader}: missing {missing[:10]}, unexpected {extra[:10]}"
    wrong = [k for k in want if got[k] != want[k]]
    assert not wrong, f"{reader}: differs at {wrong[:5]}: {got[wrong[0]]} != {want[wrong[0]]}"


def assert_contiguous(rows: list[Row], first: int = 0) -> None:
    """Per partition, offsets first, first+1, ... with nothing left out."""
    by_partition: dict[int, list[int]] = collections.defaultdict(list)
    for r in rows:
        by_partition[r[0]].append(r[1])
    for p, offsets in by_partition.items():
        offsets.sort()
        assert offsets == list(range(first, first + len(offsets))), f"partition {p} has a gap"


def utc_ms(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)
