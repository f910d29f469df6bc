"""A full disk, for real: a 2 MB tmpfs under the data directory (root only; unmounted after).

Producers get KAFKA_STORAGE_ERROR while it is full and nothing acknowledged is lost; a clean
shutdown that cannot write its markers leaves a state the next start recovers; the internal
``__consumer_offsets`` is never left half created; producing resumes once space returns.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_wire import WireClient, fetch, produce
from kio.schema.errors import ErrorCode

from pulllog.broker.topics import StorageStartError
from pulllog.group.coordinator import OFFSETS_TOPIC
from pulllog.records import build_batch
from pulllog.records.batch import RecordBatch, iter_batches
from pulllog.testing import BrokerThread

RECORD = b"r" * 20_000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs mounted at a fresh directory, unmounted at the end of the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        # Lazily if busy: a log whose close failed on the full disk may still hold its files.
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mnt)], check=True)


def grow(mnt: Path, size: str) -> None:
    """Space returns: the tmpfs grows without unmounting."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)


def fill(client: WireClient, topic: str) -> list[bytes]:
    """Produce until the disk is full; return the acknowledged values, in order."""
    acked: list[bytes] = []
    for i in range(1000):
        value = b"%06d" % i + RECORD
        answer = produce(client, topic, 0, build_batch([(None, value)]))
        code = answer.responses[0].partition_responses[0].error_code
        if code == ErrorCode.kafka_storage_error:
            return acked
        assert code == ErrorCode.none
        acked.append(value)
    raise AssertionError("the 2 MB disk never filled up")


def stored(client: WireClient, topic: str) -> list[bytes | None]:
    out: list[bytes | None] = []
    while True:
        answer = fetch(client, topic, 0, len(out), partition_max_bytes=8 << 20, max_bytes=8 << 20)
        records = answer.responses[0].partitions[0].records or b""
        values = [r.value for pos, _ in iter_batches(records) for r in RecordBatch.from_bytes(records, pos).records()]
        if not values:
            return out
        out += values


def test_a_full_disk_loses_nothing_acknowledged_across_a_shutdown_and_producing_resumes(small_disk: Path) -> None:
    data = small_disk / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        acked = fill(client, "t")
        assert acked
        answer = produce(client, "t", 0, build_batch([(None, b"still full" + RECORD)]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.kafka_storage_error
    # The shutdown ran on a full disk: whatever it could not write, the next start recovers.
    # Still full, the start either serves every acknowledged record or refuses with one
    # line (Kafka stops when its only log dir fails); it never serves without the topic.
    try:
        with BrokerThread(data) as broker, WireClient(broker.port) as client:
            assert stored(client, "t") == acked
    except StorageStartError as exc:
        assert "t-0" in str(exc) and "No space left on device" in str(exc)
    grow(small_disk, "16m")
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        assert stored(client, "t") == acked
        more = fill(client, "t")
        assert len(more) > len(acked)  # space returned: producing resumed
        assert stored(client, "t") == acked + more


def test_producing_resumes_when_space_returns_without_a_restart(small_disk: Path) -> None:
    data = small_disk / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        acked = fill(client, "t")
        grow(small_disk, "16m")
        answer = produce(client, "t", 0, build_batch([(None, b"after")]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert stored(client, "t") == [*acked, b"after"]


def test_leftover_empty_temp_files_do_not_break_the_next_start(small_disk: Path) -> None:
    data = small_disk / "data"
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        acked = fill(client, "t")
    grow(small_disk, "16m")
    # What a write cut short by a full disk leaves: empty temp files beside the real ones.
    for path in (data / "t-0" / "log-start-offset.tmp", data / "topics" / "t.json.tmp",
                 data / "meta.properties.tmp", data / "dynamic-broker-configs.json.tmp"):
        path.write_bytes(b"")
    with BrokerThread(data) as broker, WireClient(broker.port) as client:
        assert stored(client, "t") == acked


def commit(client: WireClient) -> ErrorCode:
    answer = client.call("offset_commit", 2, {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                 "committed_metadata": ""}]}]})
    return answer.topics[0].partitions[0].error_code


def fill_all_but(mnt: Path, free_bytes: int) -> Path:
    """A file taking all the disk's space but ``free_bytes``; remove it and space returns."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - free_bytes))
    return filler


def test_consumer_offsets_is_never_half_created_on_a_full_disk(small_disk: Path) -> None:
    data = small_disk / "data"
    with BrokerThread(data, offsets_topic_num_partitions=50) as broker, WireClient(broker.port) as client:
        produce(client, "t", 0, build_batch([(None, b"x")]))
        # No room at all: a new partition writes no data (empty files), its topic file does.
        filler = fill_all_but(small_disk, 0)
        assert commit(client) == ErrorCode.kafka_storage_error
        assert not (data / "topics" / f"{OFFSETS_TOPIC}.json").exists()
        assert not list(data.glob(f"{OFFSETS_TOPIC}-*"))
        assert not list((data / "topics").glob("*.tmp"))
    # still full: the start must not trip over a half-created topic
    with BrokerThread(data, offsets_topic_num_partitions=50) as broker, WireClient(broker.port) as client:
        filler.unlink()
        grow(small_disk, "4m")
        assert commit(client) == ErrorCode.none
    assert len(list(data.glob(f"{OFFSETS_TOPIC}-*"))) == 50
