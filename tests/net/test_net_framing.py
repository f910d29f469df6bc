"""FrameDecoder: size-prefixed frames out of an arbitrarily split byte stream."""

from __future__ import annotations

import struct

import pytest

from pulllog.net import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameTooLargeError,
    NegativeFrameSizeError,
    ProtocolError,
    frame,
)


def test_default_max_frame_size_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 104857600
    assert FrameDecoder().max_frame_size == 104857600


def test_one_whole_frame() -> None:
    assert FrameDecoder().feed(b"\x00\x00\x00\x03abc") == [b"abc"]


def test_several_frames_in_one_feed_come_out_in_order() -> None:
    stream = frame(b"one") + frame(b"two") + frame(b"three")
    assert FrameDecoder().feed(stream) == [b"one", b"two", b"three"]


def test_truncated_frame_waits_for_the_rest() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00\x05ab") == []
    assert decoder.buffered == 6
    assert decoder.feed(b"cde") == [b"abcde"]
    assert decoder.buffered == 0


def test_size_prefix_split_across_feeds() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00") == []
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.feed(b"\x02x") == []
    assert decoder.feed(b"y") == [b"xy"]


def test_byte_by_byte_feed_yields_the_same_frames() -> None:
    payloads = [b"", b"a", b"hello kafka", bytes(range(256))]
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == payloads
    assert decoder.buffered == 0


def test_a_large_frame_in_reads_of_any_size_comes_out_whole_after_the_frame_before() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: a librdkafka Produce at its batch.size
    stream = frame(b"small") + frame(payload) + frame(b"next")
    for piece in (1000, 65536, 262144, 999_999):
        decoder = FrameDecoder()
        out: list[bytes] = []
        for i in range(0, len(stream), piece):
            out += decoder.feed(memoryview(stream)[i : i + piece])
            assert decoder.buffered == min(i + piece, len(stream)) - sum(4 + len(f) for f in out)
        assert out == [b"small", payload, b"next"]


def test_frame_end_and_next_frame_start_in_the_same_feed() -> None:
    stream = frame(b"first") + frame(b"second")
    decoder = FrameDecoder()
    assert decoder.feed(stream[:7]) == []
    assert decoder.feed(stream[7:12]) == [b"first"]
    assert decoder.feed(stream[12:]) == [b"second"]


def test_zero_size_frame_is_an_empty_payload() -> None:
    assert FrameDecoder().feed(b"\x00\x00\x00\x00") == [b""]


def test_accepts_bytearray_and_memoryview_and_returns_bytes() -> None:
    decoder = FrameDecoder()
    data = bytearray(frame(b"abc") + frame(b"de")[:3])
    frames = decoder.feed(memoryview(data))
    data[:] = b"\xff" * len(data)  # the caller may reuse its buffer
    assert frames == [b"abc"] and type(frames[0]) is bytes
    assert decoder.feed(bytearray(frame(b"de")[3:])) == [b"de"]


def test_negative_size_is_refused() -> None:
    with pytest.raises(NegativeFrameSizeError) as caught:
        FrameDecoder().feed(struct.pack(">i", -1))
    assert caught.value.size == -1
    assert isinstance(caught.value, ProtocolError)


def test_oversized_frame_is_refused_as_soon_as_its_prefix_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    assert decoder.feed(frame(b"0123456789")) == [b"0123456789"]  # exactly the max
    with pytest.raises(FrameTooLargeError) as caught:
        decoder.feed(b"\x00\x00\x00\x0b")  # 11 > 10, no payload byte buffered yet
    assert (caught.value.size, caught.value.max_size) == (11, 10)
    assert "socket.request.max.bytes=10" in str(caught.value)


def test_decoder_stays_broken_after_a_frame_error() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\x7f\xff\xff\xff")
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame(b"ok"))


def test_frames_before_a_bad_prefix_in_the_same_feed_are_lost_with_it() -> None:
    # The connection is closed on a FrameError; nothing after the bad prefix counts.
    decoder = FrameDecoder()
    with pytest.raises(NegativeFrameSizeError):
        decoder.feed(frame(b"ok") + b"\xff\xff\xff\xfe")


def test_http_on_the_kafka_port_is_named_in_the_error() -> None:
    with pytest.raises(FrameTooLargeError, match="looks like HTTP"):
        FrameDecoder().feed(b"GET / HTTP/1.1\r\n")


def test_tls_client_hello_is_named_in_the_error() -> None:
    # 16 03 01 02 00: a TLS 1.x handshake record; as a size it is 369295872 > 100 MiB.
    with pytest.raises(FrameTooLargeError, match="TLS"):
        FrameDecoder().feed(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc")


def test_max_frame_size_must_not_be_negative() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=-1)
