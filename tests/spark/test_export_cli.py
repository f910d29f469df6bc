"""``pulllog export`` as a user runs it: a summary on success, one line and exit 1 on failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_helpers import create_topic, produce

from pulllog.spark.progress import PROGRESS_FILE


def pulllog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pulllog.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_export_prints_a_summary_then_says_nothing_is_new(pulllog_broker, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    produce(bootstrap, "orders", 500, partitions=2)
    args = ["export", "--parquet", str(tmp_path / "out"), "--topic", "orders", "--bootstrap-server", bootstrap,
            "--engine", "arrow"]

    first = pulllog(*args)
    again = pulllog(*args)

    assert first.returncode == 0, first.stderr
    assert "exported 500 records" in first.stdout and "into 2 files" in first.stdout
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing new to export: 'orders'") and "{0: 250, 1: 250}" in again.stdout


def test_unknown_topic_is_one_line_and_exit_1(pulllog_broker, tmp_path: Path) -> None:
    result = pulllog("export", "--parquet", str(tmp_path / "out"), "--topic", "nope",
                     "--bootstrap-server", pulllog_broker.bootstrap_servers)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: topic 'nope' does not exist; create it with `pulllog topic create nope`"]
    assert not (tmp_path / "out").exists()


def test_directory_holding_another_topics_export_is_refused(pulllog_broker, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    for topic in ("orders", "refunds"):
        create_topic(bootstrap, topic, 1)
        produce(bootstrap, topic, 10, partitions=1)
    out = tmp_path / "out"
    assert pulllog("export", "--parquet", str(out), "--topic", "orders", "--bootstrap-server", bootstrap,
                   "--engine", "arrow").returncode == 0
    before = (out / PROGRESS_FILE).read_text()

    result = pulllog("export", "--parquet", str(out), "--topic", "refunds", "--bootstrap-server", bootstrap,
                     "--engine", "arrow")

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {out} holds the export of topic 'orders', not 'refunds'; "
        "choose another directory (or --topic orders)"]
    assert (out / PROGRESS_FILE).read_text() == before


def test_missing_java_is_one_line_that_says_how_to_install_it(pulllog_broker, tmp_path: Path) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(no_java)

    result = pulllog("export", "--parquet", str(tmp_path / "out"), "--topic", "orders",
                     "--bootstrap-server", pulllog_broker.bootstrap_servers, env=env)

    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: Spark needs Java and no `java` is on PATH; install Java 17 or newer")
    assert "apt-get install openjdk-17-jre-headless" in line and "--engine arrow" in line


def test_a_reversed_range_is_refused_and_records_no_progress(pulllog_broker, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "orders", 1)
    produce(bootstrap, "orders", 10, partitions=1)
    out = tmp_path / "out"

    result = pulllog("export", "--parquet", str(out), "--topic", "orders", "--from", "5", "--to", "3",
                     "--bootstrap-server", bootstrap, "--engine", "arrow")

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: --from is after --to for partition 0 of 'orders' (offset 5 > 3): give a --to at or after --from"]
    assert not (out / PROGRESS_FILE).exists()


def test_an_output_directory_that_cannot_be_created_is_one_line(pulllog_broker, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "orders", 1)

    result = pulllog("export", "--parquet", "/proc/x", "--topic", "orders", "--bootstrap-server", bootstrap,
                     "--engine", "arrow")

    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: --parquet /proc/x: cannot write /proc/x")
