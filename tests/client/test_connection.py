"""The client's connection: a peer that is not a Kafka broker is named, never trusted."""

from __future__ import annotations

import asyncio

import pytest

from pulllog.client.connection import ConnectionClosedError, KafkaConnection


async def _serve_once(reply: bytes) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)  # the ApiVersions request
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_an_http_server_is_named_instead_of_a_2_gib_read() -> None:
    server, port = await _serve_once(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    try:
        with pytest.raises(ConnectionClosedError, match="looks like HTTP"):
            await KafkaConnection.connect("127.0.0.1", port, timeout=5)
    finally:
        server.close()


async def test_a_response_over_the_cap_closes_the_connection() -> None:
    server, port = await _serve_once((1_000_000).to_bytes(4, "big") + b"\x00\x00\x00\x01")
    try:
        conn = KafkaConnection("127.0.0.1", port, "test", max_response_size=1000)
        conn._reader, conn._writer = await asyncio.open_connection("127.0.0.1", port)
        conn._read_task = asyncio.get_running_loop().create_task(conn._read_loop())
        with pytest.raises(ConnectionClosedError, match="1000000 bytes, outside 4..1000"):
            await conn.request("api_versions", 0, {})
        await conn.close()
    finally:
        server.close()
