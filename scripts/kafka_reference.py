#!/usr/bin/env python3
"""Apache Kafka itself, as the reference broker that pulllog is compared against.

Fetches the Kafka jars with Maven into a cache outside the repository (``$PULLLOG_KAFKA_CACHE``,
default ``~/.cache/pulllog/kafka-<version>``), formats a single-node KRaft broker (broker and
controller in one process) in its own data directory and starts it on 127.0.0.1 with free
ports. Used by the ``kafka_reference`` pytest fixture (tests/reference/conftest.py) and from
the command line::

    python scripts/kafka_reference.py fetch              # jars only (CI does this once)
    python scripts/kafka_reference.py serve [--data-dir D] # runs until Ctrl-C, prints the bootstrap

Nothing here downloads anything but Maven artifacts: the classes of ``kafka_2.13`` and
``kafka-tools`` run straight from the jars (``kafka.Kafka``, ``kafka.tools.StorageTool``,
``org.apache.kafka.tools.*``), with no tarball.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

KAFKA_VERSION = os.environ.get("PULLLOG_KAFKA_VERSION", "4.1.1")

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pulllog</groupId><artifactId>kafka-reference</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{v}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{v}</version></dependency>
  </dependencies>
</project>
"""

# Kafka's log4j 1 compatibility layer is not on this class path: without this it prints three
# "no appenders" warnings per process and nothing else, which is what we want anyway.
_JVM_OPTS = ["-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


class ReferenceUnavailable(RuntimeError):
    """Java or Maven is missing: the reference broker cannot run here (the message says which)."""


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    root = os.environ.get("PULLLOG_KAFKA_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "pulllog" / f"kafka-{version}"


def missing_tools() -> str | None:
    """Why the reference broker cannot run here, or None when it can."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (the reference Kafka broker needs Java 17+ and Maven)"
    return None


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory holding Kafka's jars, fetched with Maven on first use."""
    libs = cache_dir(version) / "libs"
    done = cache_dir(version) / "libs.complete"
    if done.exists():
        return libs
    why = missing_tools()
    if why:
        raise ReferenceUnavailable(why)
    cache_dir(version).mkdir(parents=True, exist_ok=True)
    (cache_dir(version) / "pom.xml").write_text(_POM.format(v=version))
    shutil.rmtree(libs, ignore_errors=True)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(cache_dir(version) / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}"],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"mvn could not fetch Kafka {version}'s jars:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    done.write_text(version + "\n")
    return libs


# Spark's Kafka source (spark-sql-kafka-0-10) for the PySpark in use. Maven Central serves it
# up to 4.2.0 today; 4.2's connector runs on PySpark 4.3 (tests/spark/test_spark_kafka_source.py).
SPARK_KAFKA_VERSION = os.environ.get("PULLLOG_SPARK_KAFKA_VERSION", "4.2.0")
_SPARK_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pulllog</groupId><artifactId>spark-kafka</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{v}</version></dependency>
  </dependencies>
</project>
"""
# What the connector needs beyond what PySpark ships (Spark, Scala, Hadoop, the codecs).
_SPARK_KAFKA_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def fetch_spark_kafka_jars(version: str = SPARK_KAFKA_VERSION) -> list[Path]:
    """The jars to put on ``spark.jars`` for ``spark.read.format("kafka")``, fetched with Maven once."""
    root = cache_dir().parent / f"spark-sql-kafka-{version}"
    libs, done = root / "libs", root / "libs.complete"
    if not done.exists():
        if shutil.which("mvn") is None:
            raise ReferenceUnavailable("mvn is not installed (Spark's Kafka source comes from Maven)")
        root.mkdir(parents=True, exist_ok=True)
        (root / "pom.xml").write_text(_SPARK_POM.format(v=version))
        shutil.rmtree(libs, ignore_errors=True)
        result = subprocess.run(["mvn", "-q", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
                                 "-DincludeScope=runtime", f"-DoutputDirectory={libs}"], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"mvn could not fetch spark-sql-kafka {version}:\n{result.stdout[-3000:]}")
        done.write_text(version + "\n")
    return sorted(p for p in libs.glob("*.jar") if p.name.startswith(_SPARK_KAFKA_JARS))


def java_command(main_class: str, *args: str, libs: Path | None = None) -> list[str]:
    """A command that runs one of Kafka's classes (a broker, a tool) from the jars."""
    libs = libs or fetch_jars()
    return ["java", *_JVM_OPTS, "-cp", f"{libs}/*", main_class, *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (base64url of 16 bytes), never starting with
    "-" (the storage tool would take it for an option, as Kafka's Uuid.randomUuid avoids too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class KafkaReference:
    """One running single-node KRaft broker; :meth:`stop` kills it by PID."""

    data_dir: Path
    port: int
    controller_port: int
    process: subprocess.Popen[bytes] | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.overrides)
        return props

    def start(self, timeout_s: float = 90.0) -> "KafkaReference":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        libs = fetch_jars()
        # A restart (after stop() or kill()) keeps the formatted log directory and its data.
        if not (self.data_dir / "logs" / "meta.properties").exists():
            fmt = subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c",
                                              str(config), libs=libs), capture_output=True, text=True)
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {fmt.stdout}{fmt.stderr}")
        out = open(self.data_dir / "kafka.out", "ab")
        self.process = subprocess.Popen(java_command("kafka.Kafka", str(config), libs=libs),
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self._wait_serving(timeout_s)
        return self

    def _wait_serving(self, timeout_s: float) -> None:
        """Wait until the broker answers Metadata with itself as a live broker (a state, not a delay)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                log = (self.data_dir / "kafka.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the reference Kafka broker exited with {self.process.returncode}:\n{log}")
            if _answers_metadata(self.port):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the reference Kafka broker did not serve within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no clean shutdown); :meth:`start` restarts it on its data."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _answers_metadata(port: int) -> bool:
    """True once the broker lists at least one broker in a Metadata v1 answer."""
    request_body = b"\xff\xff\xff\xff"  # Metadata v1: topics = null (all)
    client_id = b"pulllog-reference-probe"
    header = (3).to_bytes(2, "big") + (1).to_bytes(2, "big") + (1).to_bytes(4, "big")
    header += len(client_id).to_bytes(2, "big") + client_id
    payload = header + request_body
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(len(payload).to_bytes(4, "big") + payload)
            size = int.from_bytes(_read_exactly(s, 4), "big")
            body = _read_exactly(s, size)
    except OSError:
        return False
    # correlation id (4), then brokers: array count (4)
    return len(body) >= 8 and int.from_bytes(body[4:8], "big", signed=True) > 0


def _read_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def start_reference(data_dir: Path, **overrides: str) -> KafkaReference:
    return KafkaReference(data_dir, _free_port(), _free_port(), overrides=dict(overrides)).start()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the jars (Kafka's, and Spark's Kafka source) into the cache and exit")
    serve = sub.add_parser("serve", help="run a reference broker until Ctrl-C")
    serve.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    try:
        if args.command == "fetch":
            print(fetch_jars())
            print(*fetch_spark_kafka_jars(), sep="\n")
            return 0
        import tempfile
        data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="kafka-reference-"))
        ref = start_reference(data_dir)
    except ReferenceUnavailable as exc:
        print(f"kafka_reference: {exc}", file=sys.stderr)
        return 2
    print(f"Apache Kafka {KAFKA_VERSION} serving: bootstrap.servers={ref.bootstrap_servers} (data in {data_dir}); Ctrl-C stops it",
          flush=True)
    try:
        ref.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        ref.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
