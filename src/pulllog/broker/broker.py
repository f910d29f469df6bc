"""The broker: topics on disk, the Kafka wire protocol on a socket, and the purgatory.

As a library::

    async with Broker(data_dir=tmp_path, port=0) as broker:
        ...  # clients connect to broker.bootstrap_servers

As a service: ``pulllog serve`` runs :meth:`Broker.serve` until SIGINT / SIGTERM.

Lifecycle (structured: everything the broker starts is joined before it returns):

1. load topics, running log recovery where a partition was not shut down cleanly;
2. listen, start the purgatory driver and the housekeeping loop (flush.ms, retention,
   compaction);
3. on stop: stop accepting, let each connection finish the request in hand, cancel
   long polls, then flush every log and write its clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ..group.coordinator import GroupCoordinator
from ..log.cleaner import clean
from ..log.log import wall_clock_ms
from ..net.protocol import RequestDecoder
from .config import BrokerConfig
from .handlers import registry
from ..purgatory.delayed import DelayedOperationPurgatory
from .server import Connection
from .topics import Topic, TopicManager

__all__ = ["Broker"]

log = logging.getLogger("pulllog.broker")

_SHUTDOWN_GRACE_S = 5.0


class Broker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        config: BrokerConfig | None = None,
        properties: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> None:
        cfg = config or BrokerConfig.load(properties)
        changes: dict[str, Any] = dict(overrides)
        if data_dir is not None:
            changes["data_dir"] = Path(data_dir)
        if host is not None:
            changes["host"] = host
        if port is not None:
            changes["port"] = port
        self.config: BrokerConfig = replace(cfg, **changes) if changes else cfg
        self.topics = TopicManager(self.config.data_dir, self.config.log_defaults, node_id=self.config.node_id)
        self.fetch_purgatory: DelayedOperationPurgatory[Any, Any] = DelayedOperationPurgatory("Fetch")
        self.group_purgatory: DelayedOperationPurgatory[Any, Any] = DelayedOperationPurgatory("Rebalance")
        self.groups = GroupCoordinator(
            self.topics, self.group_purgatory,
            offsets_partitions=self.config.offsets_topic_num_partitions,
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=self.config.offsets_retention_ms,
        )
        # Handlers see the broker through pulllog.broker.api.BrokerApi. These two are bound
        # once, not wrapped: Produce and Fetch call them per partition / per long poll.
        self.partition = self.topics.partition_log
        self.wait_for_fetch = self.fetch_purgatory.wait
        self.handlers = registry()
        self.supported_apis = {k: (h.min_version, h.max_version) for k, h in sorted(self.handlers.items())}
        self.decoder = RequestDecoder(self.supported_apis)
        self.connections: set[Connection] = set()
        self.accepting = False
        self.port = self.config.port
        self.recovery_report: list[str] = []
        # sendfile for Fetch; off only to measure what zero copy saves (scripts/bench_fetch.py)
        self.zero_copy = True
        self.internal_errors = 0  # handler failures (bugs): each closed one connection
        self._server: asyncio.AbstractServer | None = None
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._next_producer_id = (time.time_ns() // 1_000_000) << 8
        self._task_group: Any = None

    # ------------------------------------------------------------------ addresses

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.config.advertised_host or self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.config.advertised_port or self.port

    @property
    def bootstrap_servers(self) -> str:
        host, port = self.advertised
        return f"{host}:{port}"

    # ------------------------------------------------------------------ running

    async def serve(self, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`stop` (or cancellation); reports ``self`` once listening."""
        self.recovery_report = self.topics.load()
        for line in self.recovery_report:
            log.warning("recovery: %s", line)
        loaded = self.groups.load()
        if loaded:
            log.info("loaded %d consumer group(s) from __consumer_offsets", loaded)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: Connection(self), self.config.host, self.config.port, reuse_address=True, backlog=1024
            )
        except OSError as exc:
            self.topics.close()
            raise OSError(
                exc.errno,
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}; "
                "is another broker running there? pick another port with --listen",
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self.accepting = True
        log.info("pulllog broker %d listening on %s:%d, data in %s (%d topic(s))",
                 self.config.node_id, self.config.host, self.port, self.config.data_dir, len(self.topics.topics))
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.fetch_purgatory.run)
                await tg.start(self.group_purgatory.run)
                tg.start_soon(self._housekeeping)
                task_status.started(self)
                await self._stop.wait()
                await self._shutdown_connections()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._final_cleanup()

    async def _shutdown_connections(self) -> None:
        self.accepting = False
        if self._server is not None:
            self._server.close()
        self.fetch_purgatory.shutdown()  # long polls answer now (cancelled), not in 30 s
        self.groups.shutdown()
        self.group_purgatory.shutdown()
        for conn in list(self.connections):
            conn.begin_close()
        tasks = [c.task for c in list(self.connections) if c.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)

    async def _final_cleanup(self) -> None:
        self.accepting = False
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn.task is not None and not conn.task.done():
                conn.task.cancel()
            if conn.transport is not None:
                conn.transport.abort()
        self.fetch_purgatory.shutdown()
        self.groups.shutdown()
        self.group_purgatory.shutdown()
        self.topics.close()
        log.info("pulllog broker %d stopped cleanly", self.config.node_id)
        self._stopped.set()

    def stop(self) -> None:
        """Ask :meth:`serve` to shut down cleanly (safe to call more than once)."""
        self._stop.set()

    async def __aenter__(self) -> "Broker":
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        try:
            await self._task_group.start(self.serve)
        except BaseException:
            await self._task_group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self.stop()
        return await self._task_group.__aexit__(*exc_info)

    # ------------------------------------------------------------------ housekeeping

    async def _housekeeping(self) -> None:
        interval_s = max(0.05, min(self.config.flush_scheduler_interval_ms, 1000) / 1000)
        last_retention = last_clean = last_offsets_expiry = last_producer_expiry = wall_clock_ms()
        while True:
            await anyio.sleep(interval_s)
            now = wall_clock_ms()
            for partition_log in list(self.topics.all_logs()):
                try:
                    partition_log.maybe_flush(now)
                except OSError as exc:
                    log.error("flush of %s failed: %s", partition_log.directory.name, exc)
            if now - last_retention >= self.config.retention_check_interval_ms:
                last_retention = now
                self.run_retention(now)
            if now - last_offsets_expiry >= self.config.offsets_retention_check_interval_ms:
                last_offsets_expiry = now
                try:
                    expired = self.groups.expire_offsets(now)
                    if expired:
                        log.info("expired %d committed offset(s) past offsets.retention.minutes", expired)
                except OSError as exc:
                    log.error("offset expiry failed: %s", exc)
            if now - last_producer_expiry >= self.config.producer_id_expiration_check_interval_ms:
                last_producer_expiry = now
                self.expire_producer_ids(now)
            if now - last_clean >= self.config.cleaner_backoff_ms:
                last_clean = now
                self.run_cleaner(now)

    def run_retention(self, now: int | None = None) -> int:
        deleted = 0
        for partition_log in list(self.topics.all_logs()):
            try:
                deleted += partition_log.delete_old_segments(now)
            except OSError as exc:
                log.error("retention on %s failed: %s", partition_log.directory.name, exc)
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
        return deleted

    def expire_producer_ids(self, now: int | None = None) -> int:
        """Forget idempotent producers idle for producer.id.expiration.ms, in every log."""
        now = wall_clock_ms() if now is None else now
        expired = sum(partition_log.remove_expired_producers(now, self.config.producer_id_expiration_ms)
                      for partition_log in list(self.topics.all_logs()))
        if expired:
            log.info("expired %d idle producer id(s) past producer.id.expiration.ms", expired)
        return expired

    def run_cleaner(self, now: int | None = None) -> None:
        for topic in list(self.topics.topics.values()):
            if not topic.config.compact:
                continue
            for partition in topic.partitions:
                try:
                    stats = clean(partition.log, now)
                except (OSError, ValueError) as exc:
                    log.error("compaction of %s failed: %s", partition.name, exc)
                    continue
                if stats.segments_cleaned:
                    log.info("compacted %s: %s", partition.name, stats.summary())

    # ------------------------------------------------------------------ for handlers

    def auto_create_topic(self, name: str) -> Topic:
        topic = self.topics.create(name, self.config.num_partitions)
        log.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.get(name)
        for partition in topic.partitions:
            self.fetch_purgatory.check_and_complete((name, partition.index))
        self.topics.delete(name)

    def on_append(self, topic: str, partition: int) -> None:
        self.fetch_purgatory.check_and_complete((topic, partition))

    def next_producer_id(self) -> int:
        self._next_producer_id += 1
        return self._next_producer_id
