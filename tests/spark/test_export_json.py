"""``pulllog export --value-format json``: values parsed into the ``value_json`` struct column,
with a schema given or inferred, fixed by the first run, and the export's exactly-once rules.

A real broker, records produced by librdkafka, the real local Spark the suite starts once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pyarrow.dataset as ds
import pytest
from spark_helpers import create_topic

from pulllog.spark.export import ExportError, export
from pulllog.spark.progress import PROGRESS_FILE


def produce_values(bootstrap: str, topic: str, values: list[bytes | None], partition: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def order(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "amount": i * 1.5 if i % 2 else i, "paid": i % 3 == 0,
                       "tags": ["a", i]}).encode()


def parsed(out: Path) -> list[dict]:
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    return [r["value_json"] for r in rows]


def pulllog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pulllog.cli.main", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_an_inferred_schema_is_fixed_by_the_first_run_and_used_by_the_next(pulllog_broker, tmp_path: Path) -> None:
    bs = pulllog_broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    produce_values(bs, "orders", [order(i) for i in range(4)] + [None])
    out = tmp_path / "out"
    args = ["export", "--parquet", str(out), "--topic", "orders", "--engine", "arrow", "--value-format", "json",
            "--bootstrap-server", bs]

    first = pulllog(*args)

    assert first.returncode == 0, first.stderr
    schema = "id long, name string, amount double, paid boolean, tags json"
    assert f"values parsed as JSON into value_json: {schema}" in " ".join(first.stdout.split())  # rich may wrap
    assert json.loads((out / PROGRESS_FILE).read_text())["value_schema"] == schema
    produce_values(bs, "orders", [json.dumps({"id": 9, "name": "late", "extra": True}).encode()])
    again = pulllog(*args)
    assert again.returncode == 0, again.stderr
    assert parsed(out) == [
        {"id": 0, "name": "n0", "amount": 0.0, "paid": True, "tags": '["a",0]'},
        {"id": 1, "name": "n1", "amount": 1.5, "paid": False, "tags": '["a",1]'},
        {"id": 2, "name": "n2", "amount": 2.0, "paid": False, "tags": '["a",2]'},
        {"id": 3, "name": "n3", "amount": 4.5, "paid": True, "tags": '["a",3]'},
        None,  # a tombstone
        {"id": 9, "name": "late", "amount": None, "paid": None, "tags": None},  # "extra" is no column
    ]


def test_another_schema_or_raw_values_are_refused_for_an_existing_export(pulllog_broker, tmp_path: Path) -> None:
    bs = pulllog_broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    produce_values(bs, "orders", [order(i) for i in range(3)])
    out = tmp_path / "out"
    export(bs, "orders", out, engine="arrow", value_format="json", value_schema="id long")
    produce_values(bs, "orders", [order(3)])
    before = (out / PROGRESS_FILE).read_text()

    with pytest.raises(ExportError, match="holds values with the schema 'id long', not 'id long, name string'"):
        export(bs, "orders", out, engine="arrow", value_format="json", value_schema="id long, name string")
    with pytest.raises(ExportError, match="holds values parsed as JSON"):
        export(bs, "orders", out, engine="arrow")

    assert (out / PROGRESS_FILE).read_text() == before
    result = export(bs, "orders", out, engine="arrow", value_format="json", full=True,
                    value_schema="id long, name string")
    assert result.value_schema == "id long, name string" and result.records == 4


def test_a_value_that_does_not_fit_fails_the_run_and_publishes_nothing(pulllog_broker, tmp_path: Path) -> None:
    bs = pulllog_broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    produce_values(bs, "orders", [order(0), b'{"id": "seven"}', b"not json"])
    out = tmp_path / "out"

    with pytest.raises(ExportError, match=r"partition 0 offset 1: field 'id' is \"seven\", not a long"):
        export(bs, "orders", out, engine="arrow", value_format="json", value_schema="id long")
    result = pulllog("export", "--parquet", str(out), "--topic", "orders", "--engine", "arrow",
                     "--value-format", "json", "--bootstrap-server", bs)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        ("error: partition 0 offset 2: the value is not JSON (Expecting value: line 1 column 1 (char 0)); "
         "export it with --value-format raw")]
    assert not list(out.glob("*=*/**/*.parquet"))
    assert not (out / PROGRESS_FILE).exists()  # no progress, no schema: the next run starts afresh


def test_the_spark_engine_writes_the_same_parsed_columns(pulllog_broker, spark, tmp_path: Path) -> None:
    bs = pulllog_broker.bootstrap_servers
    create_topic(bs, "orders", 2)
    for p in (0, 1):
        produce_values(bs, "orders", [order(i) for i in range(p * 10, p * 10 + 5)], partition=p)

    export(bs, "orders", tmp_path / "spark", engine="spark", spark=spark, value_format="json",
           value_schema="id long, name string, amount double")
    export(bs, "orders", tmp_path / "arrow", engine="arrow", value_format="json",
           value_schema="id long, name string, amount double")

    rows = spark.read.parquet(str(tmp_path / "spark")).select("value_json.*").orderBy("id").collect()
    assert [(r.id, r.name, r.amount) for r in rows] == [
        (i, f"n{i}", i * 1.5 if i % 2 else float(i)) for i in (0, 1, 2, 3, 4, 10, 11, 12, 13, 14)]
    files = {engine: {p.relative_to(tmp_path / engine): p.read_bytes()
                      for p in (tmp_path / engine).glob("*=*/**/*.parquet")} for engine in ("spark", "arrow")}
    assert files["spark"] == files["arrow"] and len(files["spark"]) == 2


def test_a_bad_schema_is_one_line() -> None:
    result = pulllog("export", "--parquet", "out", "--topic", "t", "--engine", "arrow", "--value-format", "json",
                     "--value-schema", "id lng", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.startswith("error: --value-schema: field 'id' has type 'lng'; use one of ")
