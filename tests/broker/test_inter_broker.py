"""The replica fetcher's connection (broker/inter_broker.py's BrokerConnection): whole answers
of several MiB from a real broker, and a peer that lies or leaves fails the exchange."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pulllog.broker import Broker
from pulllog.broker.inter_broker import BrokerConnection
from pulllog.log import Log
from pulllog.net.apis import ApiKey
from pulllog.records import build_batch


def _fetch(topic: str, max_bytes: int) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}]}


async def test_an_answer_of_several_mebibytes_arrives_whole(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path, port=0) as broker:
        broker.topics.create("big", 1, {})
        partition_log = broker.topics.partition_log("big", 0)
        assert isinstance(partition_log, Log)
        for i in range(24):  # 24 batches of ~128 KiB: the answer comes in many reads
            partition_log.append(build_batch([(b"k%d" % i, bytes([i]) * 1024) for _ in range(128)]))
        stored = b"".join(s.log_path.read_bytes() for s in partition_log.segments)
        connection = await BrokerConnection.open("127.0.0.1", broker.port)
        try:
            for correlation_id in (1, 2):  # the connection serves one request after another
                answer = await connection.exchange(ApiKey.FETCH, 12, _fetch("big", 8 << 20),
                                                   correlation_id=correlation_id, client_id="test")
                assert bytes(answer.responses[0].partitions[0].records) == stored
        finally:
            connection.close()
    assert len(stored) > 3 << 20


async def _exchange_with(peer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                         max_answer_bytes: int = 1 << 20) -> tuple[BrokerConnection, BaseException]:
    """One ApiVersions exchange with a peer that answers as ``peer`` does: the error it raised."""
    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        loop = asyncio.get_running_loop()
        _t, connection = await loop.create_connection(lambda: BrokerConnection(max_answer_bytes), "127.0.0.1", port)
        with pytest.raises((OSError, EOFError, ValueError)) as raised:
            await connection.exchange(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                               "client_software_version": "1"},
                                      correlation_id=7, client_id="test")
        return connection, raised.value
    finally:
        server.close()
        await server.wait_closed()


async def _answer_for_another_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
    # ApiVersions v3's answer (no api keys) with correlation id 8: well formed, for another request
    body = struct.pack(">ih", 8, 0) + b"\x01" + struct.pack(">i", 0) + b"\x00"
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()
    await reader.read()


async def _oversized_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
    writer.write(struct.pack(">i", 1 << 30))
    await writer.drain()
    await reader.read()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readexactly(4)
    writer.write(b"\x00\x00")  # half an answer's size, then gone
    writer.close()


@pytest.mark.parametrize("peer, error", [(_answer_for_another_request, ValueError),
                                         (_oversized_answer, ValueError),
                                         (_hang_up, EOFError)])
async def test_a_peer_that_lies_or_leaves_fails_the_exchange_and_the_connection(
        peer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]], error: type) -> None:
    connection, raised = await _exchange_with(peer)
    assert isinstance(raised, error)
    with pytest.raises((OSError, EOFError, ValueError)):  # broken for good: the fetcher opens a new one
        await connection.exchange(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"},
                                  correlation_id=9, client_id="test")
    connection.close()
