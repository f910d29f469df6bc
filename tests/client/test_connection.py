"""The client's connection: a peer that is not a Kafka broker is named, never trusted; requests
written together leave together."""

from __future__ import annotations

import asyncio
import struct

import pytest

from pulllog.client.connection import ConnectionClosedError, KafkaConnection
from waits import wait_until


async def _serve_once(reply: bytes) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)  # the ApiVersions request
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _record_writes(conn: KafkaConnection) -> list[bytes]:
    """Every buffer the connection hands its transport from now on, in order."""
    writes: list[bytes] = []
    transport = conn._transport
    assert transport is not None
    write = transport.write
    transport.write = lambda data: (writes.append(bytes(data)), write(data))[1]  # type: ignore[method-assign]
    return writes


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
        await conn.open(timeout=5)
        with pytest.raises(ConnectionClosedError, match="1000000 bytes, outside 4..1000"):
            await conn.request("api_versions", 0, {})
        assert conn.closed
        await conn.close()
    finally:
        server.close()


def _api_versions_v0(correlation_id: int, keys: int) -> bytes:
    """An ApiVersions v0 response frame listing ``keys`` APIs (6 bytes each)."""
    body = correlation_id.to_bytes(4, "big") + b"\x00\x00" + keys.to_bytes(4, "big")
    body += b"".join(struct.pack(">hhh", i % 30_000, 0, i % 7) for i in range(keys))
    return len(body).to_bytes(4, "big") + body


async def test_frames_larger_than_the_read_buffer_arrive_whole_in_pieces() -> None:
    # Two pipelined requests answered with frames of ~600 KB (over the 256 KiB read buffer),
    # written in 1000-byte pieces with the second frame's start in the first's last piece.
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ids = []
        for _ in range(2):
            size = int.from_bytes(await reader.readexactly(4), "big")
            request = await reader.readexactly(size)
            ids.append(int.from_bytes(request[4:8], "big"))
        data = _api_versions_v0(ids[0], 100_000) + _api_versions_v0(ids[1], 99_999)
        for i in range(0, len(data), 1000):
            writer.write(data[i:i + 1000])
            await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        conn = KafkaConnection("127.0.0.1", server.sockets[0].getsockname()[1], "test")
        await conn.open(timeout=5)
        first, second = await asyncio.gather(conn.request("api_versions", 0, {}), conn.request("api_versions", 0, {}))
        assert len(first.api_keys) == 100_000 and len(second.api_keys) == 99_999
        assert (int(second.api_keys[-1].api_key), int(second.api_keys[-1].max_version)) == (
            99_998 % 30_000, 99_998 % 7)
        await conn.close()
        assert conn.closed
    finally:
        server.close()


async def test_a_peer_that_closes_fails_the_requests_in_flight() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        conn = KafkaConnection("127.0.0.1", server.sockets[0].getsockname()[1], "test")
        await conn.open(timeout=5)
        with pytest.raises(ConnectionClosedError, match="was lost"):
            await conn.request("api_versions", 0, {})
        assert conn.closed
        with pytest.raises(ConnectionClosedError, match="is closed"):
            await conn.request("api_versions", 0, {})
        await conn.close()
    finally:
        server.close()


async def test_requests_written_in_one_turn_of_the_loop_leave_in_one_write() -> None:
    """A pipelining producer fills several in-flight slots at once: one write (one send()
    for the client, one recv() for the broker) instead of one per request."""
    received = bytearray()
    got_all = asyncio.Event()
    expected = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            received.extend(chunk)
            if expected and len(received) >= expected:
                got_all.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = KafkaConnection("127.0.0.1", port, "test")
    try:
        await conn.open(timeout=5)
        writes = _record_writes(conn)

        frames = 5
        await asyncio.gather(*(conn.request("api_versions", 0, {}, expect_response=False) for _ in range(frames)))
        expected = sum(map(len, writes))
        assert expected, "nothing was written"
        if len(received) >= expected:
            got_all.set()
        await asyncio.wait_for(got_all.wait(), 10)

        assert len(writes) == 1
        assert bytes(received) == writes[0]
        sizes, at = [], 0
        while at < len(received):
            sizes.append(int.from_bytes(received[at:at + 4], "big"))
            at += 4 + sizes[-1]
        assert len(sizes) == frames and len(set(sizes)) == 1
    finally:
        await conn.close()
        server.close()


async def test_a_fetch_alone_is_written_at_once_not_at_the_end_of_the_turn() -> None:
    """A consumer's Fetch is alone on its connection: deferring its write to the end of the
    loop's turn (as for a producer's pipelined requests) only adds a turn per round trip."""
    server = await asyncio.start_server(lambda r, w: r.read(65536), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = KafkaConnection("127.0.0.1", port, "test")
    try:
        await conn.open(timeout=5)
        writes = _record_writes(conn)
        frame = struct.pack(">i", 4) + b"\0\0\0\0"
        fetch = asyncio.ensure_future(conn.request_encoded("fetch", 12, lambda cid, client: frame))
        await asyncio.sleep(0)  # the task's first step runs; a deferred write would come a turn later
        assert writes == [frame]
        fetch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fetch
    finally:
        await conn.close()
        server.close()


async def test_send_hands_the_answer_to_its_callback_and_a_held_frame_waits_for_flush(pulllog_broker) -> None:
    from pulllog.net.build import build, request_class
    from pulllog.net.protocol import encode_request

    conn = await KafkaConnection.connect("127.0.0.1", pulllog_broker.port, client_id="test")
    try:
        writes = _record_writes(conn)
        answered: asyncio.Future[tuple[bytes | None, BaseException | None]] = asyncio.get_running_loop().create_future()
        correlation_id = conn.next_correlation_id()
        frame = encode_request(build(request_class("api_versions", 0), {}), correlation_id=correlation_id,
                               client_id="test")

        conn.send(correlation_id, frame, lambda *answer: answered.set_result(answer), hold=True)
        await asyncio.sleep(0)  # a turn of the loop: a held frame is not written
        assert writes == [] and conn.in_flight == 1
        conn.flush()

        response, error = await asyncio.wait_for(answered, 10)
        assert writes == [frame]
        assert error is None and response is not None
        assert struct.unpack_from(">i", response)[0] == correlation_id
        assert conn.in_flight == 0
    finally:
        await conn.close()


async def test_a_connection_that_ends_tells_every_send_callback_once() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    conn = KafkaConnection("127.0.0.1", server.sockets[0].getsockname()[1], "test")
    try:
        await conn.open(timeout=5)
        answers: list[tuple[bytes | None, BaseException | None]] = []
        for _ in range(3):
            cid = conn.next_correlation_id()
            conn.send(cid, struct.pack(">ihhi", 8, 18, 0, cid), lambda *answer: answers.append(answer))
        await wait_until(lambda: conn.closed, "the peer closed the connection")
        assert len(answers) == 3
        assert all(r is None and isinstance(e, ConnectionClosedError) for r, e in answers)
        with pytest.raises(ConnectionClosedError, match="is closed"):
            conn.send(conn.next_correlation_id(), b"", None)
        conn.abort(ConnectionClosedError("again"))
        assert len(answers) == 3
    finally:
        await conn.close()
        server.close()
