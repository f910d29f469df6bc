#!/usr/bin/env python3
"""A private ZooKeeper and a pulllog cluster on loopback, for tests and by hand.

ZooKeeper is Debian's ``zookeeper`` package (``apt-get install zookeeper``: its jars in
/usr/share/java), run as a standalone server straight from the jars
(``org.apache.zookeeper.server.ZooKeeperServerMain``) with its own config and data directory,
on 127.0.0.1 and a free port. It is ready when it answers the ``srvr`` four-letter word with
its mode (it is serving, not only listening). Brokers are ``pulllog serve --broker-id N
--zookeeper ...`` processes, broker N on 127.0.0.N (every 127.x.y.z address is loopback on
Linux) and a port the kernel picks at its first start (a restart listens on the same port); each
is ready when it prints its "ready" line. Everything
is stopped by PID: SIGTERM, then SIGKILL if it has not exited.

Used by the pytest fixtures in tests/cluster/conftest.py and from the command line::

    python scripts/zk_cluster.py zookeeper            # ZooKeeper alone; prints zookeeper.connect
    python scripts/zk_cluster.py cluster --brokers 3  # ZooKeeper and 3 brokers, until Ctrl-C
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ZOOKEEPER_JARS = Path(os.environ.get("PULLLOG_ZOOKEEPER_JARS", "/usr/share/java"))
# ZooKeeper's server and its wire format, and slf4j's API with its no-op binding (the server
# logs nothing; its state is read with four-letter words instead).
_CLASSPATH = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-nop.jar")
TICK_MS = 500  # sessions may be as short as 2 ticks: tests use 1-3 s sessions to see a death fast
STOP_TIMEOUT_S = 20.0


def missing_tools() -> str | None:
    """Why ZooKeeper cannot run here, or None."""
    if shutil.which("java") is None:
        return "java is not installed (scripts/test.sh installs openjdk-17-jre-headless)"
    missing = [name for name in _CLASSPATH if not (ZOOKEEPER_JARS / name).exists()]
    if missing:
        return f"ZooKeeper's jars are missing ({', '.join(missing)}): apt-get install zookeeper"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """ZooKeeper's answer to a four-letter word ('' when it does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen[str], timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM ``proc`` by its PID, then SIGKILL if it is still there after ``timeout_s``."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


@dataclass
class ZooKeeper:
    """One standalone ZooKeeper server on loopback."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)

    @property
    def connect(self) -> str:
        """zookeeper.connect for a broker (no chroot)."""
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> ZooKeeper:
        why = missing_tools()
        if why:
            raise RuntimeError(why)
        self.port = self.port or free_port(self.host)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxSessionTimeout=60000",
            "4lw.commands.whitelist=ruok,srvr,stat",
            "admin.enableServer=false",  # its Jetty console would take port 8080
        ]) + "\n")
        classpath = ":".join(str(ZOOKEEPER_JARS / name) for name in _CLASSPATH)
        with open(self.data_dir / "zookeeper.out", "w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + timeout_s
        while "Mode: standalone" not in four_letter_word(self.host, self.port, "srvr"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode} before serving: "
                                   f"{(self.data_dir / 'zookeeper.out').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not serve on {self.connect} within {timeout_s:.0f} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


@dataclass
class BrokerProcess:
    """``pulllog serve`` as a cluster member."""

    broker_id: int
    data_dir: Path
    zookeeper_connect: str
    host: str = ""
    overrides: tuple[str, ...] = ()
    # Where its log goes (pulllog serve logs to stdout; rich's lines, not wrapped); None: nowhere.
    log_file: Path | None = None
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)
    bootstrap_servers: str = ""
    stderr_lines: list[str] = field(default_factory=list, repr=False)

    def start(self, timeout_s: float = 60.0) -> BrokerProcess:
        """Start it and wait for its ready line; RuntimeError with its stderr if it exits instead."""
        self.proc = self.spawn()
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))
            if line.startswith("pulllog broker ready: bootstrap.servers="):
                self.bootstrap_servers = line.split("=", 1)[1].split()[0]
                # Keep reading its log, so a full pipe never blocks the broker.
                threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()
                return self
            if time.monotonic() > deadline:
                break
        self.stop()
        raise RuntimeError(f"broker {self.broker_id} did not start: " + "\n".join(self.stderr_lines[-20:]))

    def _drain(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self.stderr_lines.append(line.rstrip("\n"))
        except (OSError, ValueError):  # closed by stop()
            pass

    def command(self) -> list[str]:
        host = self.host or f"127.0.0.{self.broker_id if 0 < self.broker_id < 255 else 1}"
        # The first start takes a port the kernel picks; a restart listens there again, as a
        # deployed broker does: a client whose metadata missed a restart would otherwise know
        # only dead addresses once every broker of a rolling restart had moved.
        port = self.bootstrap_servers.rsplit(":", 1)[1] if self.bootstrap_servers else "0"
        args = [sys.executable, "-m", "pulllog.cli.main", "serve", "--broker-id", str(self.broker_id),
                "--zookeeper", self.zookeeper_connect, "--listen", f"{host}:{port}", "--data-dir", str(self.data_dir)]
        for item in self.overrides:
            args += ["--override", item]
        return args

    def spawn(self) -> subprocess.Popen[str]:
        if self.log_file is None:
            return subprocess.Popen(self.command(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL, text=True)
        with open(self.log_file, "a") as log:  # the child keeps its own descriptor
            return subprocess.Popen(self.command(), stderr=subprocess.PIPE, stdout=log, stdin=subprocess.DEVNULL,
                                    text=True, env={**os.environ, "COLUMNS": "400"})

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, its ZooKeeper session ends only when it times out."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        return stop_process(self.proc)


def start_brokers(zookeeper_connect: str, base_dir: Path, count: int,
                  overrides: tuple[str, ...] = ()) -> list[BrokerProcess]:
    """Brokers 1..count on 127.0.0.1..count, started one after another (so broker 1 is the
    first controller). On an error the ones already started are stopped."""
    brokers: list[BrokerProcess] = []
    try:
        for broker_id in range(1, count + 1):
            brokers.append(BrokerProcess(broker_id, base_dir / f"broker-{broker_id}", zookeeper_connect,
                                         overrides=overrides).start())
        wait_for_membership(brokers)
    except BaseException:
        for broker in brokers:
            broker.stop()
        raise
    return brokers


def wait_for_membership(brokers: list[BrokerProcess], timeout_s: float = 60.0) -> None:
    """Until every broker's Metadata names all of them. A broker is ready once it has registered,
    but the others (the controller among them) learn of it from a watch a moment later; a
    CreateTopics in between would be refused as Kafka refuses it (too few live brokers)."""
    wanted = {b.broker_id for b in brokers}
    deadline = time.monotonic() + timeout_s
    for broker in brokers:
        while (seen := metadata_brokers(broker.bootstrap_servers)) != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker.broker_id} sees brokers {sorted(seen)}, "
                                   f"not {sorted(wanted)}, after {timeout_s} s")
            time.sleep(0.02)


def metadata_brokers(bootstrap: str) -> set[int]:
    """The broker ids one broker's own Metadata answer names (v1, no topics)."""
    from pulllog.net.build import build, request_class, response_class
    from pulllog.net.protocol import decode_response, encode_request

    host, port = bootstrap.rsplit(":", 1)
    request = encode_request(build(request_class("metadata", 1), {"topics": []}), correlation_id=1,
                             client_id="zk-cluster-membership")
    with socket.create_connection((host, int(port)), timeout=10) as sock, sock.makefile("rb") as answers:
        sock.sendall(request)
        size = int.from_bytes(answers.read(4), "big")
        frame = answers.read(size)  # a buffered read returns short only at the end of the stream
        if len(frame) != size:
            raise ConnectionError("the broker closed the connection")
        _, answer = decode_response(frame, response_class("metadata", 1))
    return {int(b.node_id) for b in answer.brokers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["zookeeper", "cluster"])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a new temporary directory")
    parser.add_argument("--chroot", default="/pulllog")
    args = parser.parse_args()
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="pulllog-cluster-"))
    zk = ZooKeeper(base / "zookeeper").start()
    brokers: list[BrokerProcess] = []
    try:
        print(f"zookeeper.connect={zk.connect}  (data in {base})", flush=True)
        if args.what == "cluster":
            brokers = start_brokers(zk.connect + args.chroot, base, args.brokers)
            print("bootstrap.servers=" + ",".join(b.bootstrap_servers for b in brokers), flush=True)
        print("Ctrl-C stops it", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for broker in brokers:
            broker.stop()
        zk.stop()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    main()
