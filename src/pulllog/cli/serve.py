"""``pulllog serve``: run a broker until SIGINT / SIGTERM, then shut down cleanly.

Before anything starts, the command checks what a new user gets wrong most often, each with a
one-line error that names the culprit: the data directory can be created and written, the
``--listen`` host resolves, every config name is pulllog's or Kafka's (Kafka's settings that do
not apply are accepted with one warning each, so a stock server.properties works).

A start the broker refuses (another broker holds the data directory's lock; a topic on disk
cannot be opened; ZooKeeper cannot be reached or another live broker has this broker.id) ends with the broker's one-line reason and exit code 1, never a traceback.
"""

from __future__ import annotations

from . import _asyncio_without_ssl  # noqa: F401  (first: see there)

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..broker.config import BrokerConfig, ConfigError, parse_hostport
from .errors import EXIT_USAGE, CliError
from .help import examples

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["serve"]


def _without_hypothesis_for_kio() -> None:
    """kio registers hypothesis strategies for its Kafka types at import whenever hypothesis
    is installed: a test library, and most of a second of a broker's start. A broker process
    never generates test data, so unless something in this process already uses hypothesis
    (or imported kio), kio is shown it as absent (``None`` in ``sys.modules`` makes that
    import fail, which kio handles)."""
    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def _load_broker() -> "type[Broker]":
    """The broker, imported when a broker is about to run (not for ``--help``)."""
    _without_hypothesis_for_kio()
    from ..broker.broker import Broker

    return Broker


# Kafka's log4j layout ("[%d] %p %m (%c)%n"): one plain line per record.
PLAIN_LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def _setup_logging(level: str) -> None:
    """rich's console on a terminal; plain timestamped lines otherwise (a pipe, a file, a
    service manager): rich lays each record out to the console's width, ~1 ms of CPU a line,
    which a broker taking over 50 partitions pays on its event loop."""
    if sys.stdout.isatty():
        logging.basicConfig(level=level.upper(), format="%(message)s", datefmt="[%X]",
                            handlers=[_RichOnFirstRecord()])
    else:
        logging.basicConfig(level=level.upper(), format=PLAIN_LOG_FORMAT,
                            handlers=[logging.StreamHandler(sys.stdout)])


class _RichOnFirstRecord(logging.Handler):
    """rich's log handler, built when the first record comes: importing rich is a tenth of
    a broker's start, and at ``--log-level warning`` a start logs nothing. The records look
    the same as with a RichHandler installed up front."""

    def __init__(self) -> None:
        super().__init__()
        self._rich: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._rich is None:  # under this handler's lock (Handler.handle): built once
            from rich.logging import RichHandler

            self._rich = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
            self._rich.setFormatter(self.formatter)
        self._rich.emit(record)


@click.command(epilog=examples(
    "pulllog serve",
    "pulllog serve --data-dir /var/lib/pulllog --listen 0.0.0.0:9092 --advertised-listener broker1:9092",
    "pulllog serve --config server.properties --override num.partitions=3 --override log.retention.hours=24",
    "pulllog serve --broker-id 1 --zookeeper 127.0.0.1:2181/pulllog --listen 127.0.0.1:9092 --data-dir d1",
))
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the logs live (log.dirs). Default: ./pulllog-data")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Address to listen on (listeners). Default: 127.0.0.1:9092")
@click.option("--advertised-listener", default=None, metavar="HOST:PORT",
              help="Address clients are told to connect to (advertised.listeners).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A server.properties file with Kafka's broker config names.")
@click.option("--override", "overrides", multiple=True, metavar="NAME=VALUE",
              help="A broker config, e.g. --override num.partitions=3 (repeatable).")
@click.option("--broker-id", type=click.IntRange(0, 2**31 - 1), default=None, metavar="N",
              help="This broker's id (broker.id); unique in a cluster. Default: 0")
@click.option("--zookeeper", default=None, metavar="HOST:PORT[/chroot]",
              help="Join the cluster coordinated by this ZooKeeper (zookeeper.connect): register as "
                   "broker --broker-id and take part in the controller election. Without it (and "
                   "without zookeeper.connect) the broker runs alone and needs no ZooKeeper.")
@click.option("--start-with-offline-partitions", is_flag=True, default=None,
              help="Start even when a partition on disk cannot be opened (start.with.offline.partitions=true): "
                   "the partitions that failed answer KAFKA_STORAGE_ERROR, the others are served, and the "
                   "topic is never re-created. Without it such a start stops with one line naming the path "
                   "and the cause.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True,
              help="Log lines go to stdout: rich's layout on a terminal, '[date time,ms] LEVEL message (logger)' otherwise.")
@click.option("--loop", type=click.Choice(["asyncio", "uvloop"]), default="asyncio", show_default=True,
              help="Event loop. uvloop (pip install 'pulllog[uvloop]') has no sendfile: Fetch copies segment "
                   "bytes instead; scripts/bench_paper.py --broker-loop measures both.")
def serve(data_dir: Path | None, listen: str | None, advertised_listener: str | None,
          config_file: Path | None, overrides: tuple[str, ...], broker_id: int | None, zookeeper: str | None,
          start_with_offline_partitions: bool | None, log_level: str, loop: str) -> None:
    """Run a broker that Kafka clients (kcat, librdkafka, aiokafka, kafka-python) can use."""
    props = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--override {item!r}: expected NAME=VALUE, e.g. num.partitions=3", EXIT_USAGE)
        props[name.strip()] = value.strip()
    try:
        config = BrokerConfig.load(props, config_file=config_file, kafka_defaults=True)
        changes: dict[str, Any] = {}
        if data_dir is not None:
            changes["data_dir"] = data_dir
        if listen is not None:
            changes["host"], changes["port"] = parse_hostport(listen)
        if advertised_listener is not None:
            changes["advertised_host"], changes["advertised_port"] = parse_hostport(advertised_listener)
        if start_with_offline_partitions:
            changes["start_with_offline_partitions"] = True
        if broker_id is not None:
            changes["node_id"] = broker_id
        if zookeeper is not None:
            props["zookeeper.connect"] = zookeeper  # checked as the setting is
        config = BrokerConfig.load(props, config_file=config_file, kafka_defaults=True,
                                   **changes) if changes or zookeeper is not None else config
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    _check_host(config.host, "--listen" if listen is not None else "listeners")
    _check_data_dir(config.data_dir)
    for setting in config.ignored:
        click.echo(f"warning: {setting}", err=True)
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise CliError("--loop uvloop needs uvloop: pip install 'pulllog[uvloop]'", EXIT_USAGE) from None
        loop_factory = uvloop.new_event_loop
    _setup_logging(log_level)
    broker = _load_broker()(config=config)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_run(broker))
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        # Imported with the broker (here: already loaded), not at the top: broker.topics pulls
        # kio in, which must wait until _load_broker kept hypothesis away from it.
        from ..broker.lock import DataDirInUseError
        from ..broker.topics import StorageStartError

        refused = _first(exc, (StorageStartError, DataDirInUseError))
        if refused is None and config.zookeeper_connect is not None:
            from ..cluster.errors import ClusterStartError

            refused = _first(exc, ClusterStartError)
        if refused is not None:
            raise CliError(str(refused)) from None
        os_error = _first(exc, OSError)
        if not isinstance(os_error, OSError):
            raise
        where = f" ({os_error.filename})" if os_error.filename else ""
        raise CliError(f"{os_error.strerror or os_error}{where}") from None


def _check_host(host: str, option: str) -> None:
    """A listen host that does not resolve is a typo, not a busy port: say so."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise CliError(f"{option}: the host {host!r} does not resolve; listen on an address of this machine, "
                       "e.g. 127.0.0.1 or 0.0.0.0", EXIT_USAGE) from None


def _check_data_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--data-dir {path}: cannot create it ({exc.strerror}); pick a directory you can write",
                       EXIT_USAGE) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CliError(f"--data-dir {path}: not writable by this user; pick a directory you can write", EXIT_USAGE)


def _first(exc: BaseException, kind: type[Exception] | tuple[type[Exception], ...]) -> Exception | None:
    """The first ``kind`` inside ``exc``, looking through task-group exception groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


async def _run(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    # Before serving: a SIGTERM sent as soon as "ready" is printed, or during log recovery,
    # still shuts the broker down cleanly instead of killing it.
    for signum in signals:
        loop.add_signal_handler(signum, _on_signal, broker, signum)
    try:
        ready: asyncio.Future[Broker] = loop.create_future()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(broker.serve(ready=ready), name="pulllog-broker")
            await ready
            click.echo(f"pulllog broker ready: bootstrap.servers={broker.bootstrap_servers} "
                       f"(data in {broker.config.data_dir.resolve()}); Ctrl-C stops it", err=True)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)  # no-op for a handler _on_signal removed


def _on_signal(broker: Broker, signum: int) -> None:
    logging.getLogger("pulllog.broker").info("%s received: shutting down cleanly", signal.Signals(signum).name)
    broker.stop()
    # Once is enough: a second Ctrl-C during the shutdown's grace period interrupts it.
    loop = asyncio.get_running_loop()
    for other in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(other)
