"""recovery-point-offset-checkpoint: a `pulllog serve` killed with SIGKILL after a flush
restarts without checking a flushed batch, and the checkpoint survives restarts."""

from __future__ import annotations

import signal
from pathlib import Path

import confluent_kafka
import pytest
from test_serve_process import ServeProcess, consume_all, free_port
from waits import block_until

from pulllog.broker import Broker
from pulllog.broker.topics import StorageStartError, TopicManager
from pulllog.log import LogConfig
from pulllog.log.checkpoint import RECOVERY_POINT_CHECKPOINT_FILE, read_offsets
from pulllog.records import build_batch

# fsync every append, and checkpoint the recovery points often (Kafka's default is 60 s).
OVERRIDES = ("log.flush.interval.messages=1", "log.flush.offset.checkpoint.interval.ms=50")


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(first, first + count):
        producer.produce("t", b"value-%d" % i, partition=0)
    assert producer.flush(30) == 0


def checkpointed(data_dir: Path) -> int | None:
    return read_offsets(data_dir / RECOVERY_POINT_CHECKPOINT_FILE).get(("t", 0))


def recovery_line(broker: ServeProcess) -> str:
    """What this broker's start logged about t-0 (the console log wraps long lines)."""
    text = " ".join(broker.log.read_text().split())
    at = text.rfind("recovery: t-0:")
    return text[at : at + 90] if at >= 0 else ""


def test_the_recovery_checkpoint_survives_a_sigkill_and_a_clean_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = ServeProcess(data, free_port(), OVERRIDES).start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        produce(bootstrap, 0, 20)
        block_until(lambda: checkpointed(data) == 20, "the checkpoint holds t-0's flushed log end 20")
        broker.signal(signal.SIGKILL)

        broker = ServeProcess(data, free_port(), OVERRIDES).start()
        assert "checked 0 batch(es)" in recovery_line(broker)  # nothing past the recovery point
        bootstrap = f"127.0.0.1:{broker.port}"
        produce(bootstrap, 20, 5)
        assert broker.signal(signal.SIGTERM) == 0
        assert checkpointed(data) == 25  # written at clean shutdown

        broker = ServeProcess(data, free_port(), OVERRIDES).start()
        assert checkpointed(data) == 25
        broker.signal(signal.SIGKILL)  # before anything new: the loaded points carry over
        broker = ServeProcess(data, free_port(), OVERRIDES).start()
        assert "checked 0 batch(es)" in recovery_line(broker)
        got = consume_all(f"127.0.0.1:{broker.port}", "t", 3)
        assert [v for _, v in got[0]] == [b"value-%d" % i for i in range(25)]
    finally:
        broker.stop()


# Kafka's defaults (no flush.ms, no flush.messages) but tiny segments: only rolls flush.
ROLLING = ("log.segment.bytes=400", "log.flush.offset.checkpoint.interval.ms=50")


def produce_one_batch_each(bootstrap: str, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce("t", b"value-%d" % i, partition=0)
        assert producer.flush(30) == 0


def segment_bases(partition_dir: Path) -> list[int]:
    return sorted(int(path.stem) for path in partition_dir.glob("*.log"))


def test_a_rolled_segment_is_flushed_so_a_sigkill_rechecks_only_the_active_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = ServeProcess(data, free_port(), ROLLING).start()
    try:
        produce_one_batch_each(f"127.0.0.1:{broker.port}", 40)  # 40 batches of ~80 bytes
        bases = segment_bases(data / "t-0")
        assert len(bases) >= 3, bases  # several rolls
        active = bases[-1]
        block_until(lambda: (checkpointed(data) or 0) >= active,
                    f"the checkpoint reaches the active segment's base offset {active}")
        broker.signal(signal.SIGKILL)

        broker = ServeProcess(data, free_port(), ROLLING).start()
        line = recovery_line(broker)
        checked = int(line.split("checked ", 1)[1].split(" ", 1)[0])
        assert checked <= 40 - active, line  # at most the active segment's batches (main: 40)
        got = consume_all(f"127.0.0.1:{broker.port}", "t", 3)
        assert [v for _, v in got[0]] == [b"value-%d" % i for i in range(40)]
    finally:
        broker.stop()


async def test_deleting_a_topic_drops_its_recovery_points_from_the_checkpoint(tmp_path: Path) -> None:
    async with Broker(tmp_path, host="127.0.0.1", port=0) as broker:
        topic = broker.topics.create("gone", 2, {"flush.messages": "1"})
        topic.partitions[0].log.append(build_batch([(b"k", b"v")]))
        await broker.checkpoint_recovery_points()
        assert checkpointed_points(tmp_path)[("gone", 0)] == 1
        broker.topics.delete("gone")
        # a topic created again under the name must not inherit offset 1 as flushed
        assert ("gone", 0) not in checkpointed_points(tmp_path)


def checkpointed_points(data_dir: Path) -> dict[tuple[str, int], int]:
    return read_offsets(data_dir / RECOVERY_POINT_CHECKPOINT_FILE)


def test_an_offline_topic_keeps_its_recovery_points_in_the_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topics = TopicManager(data, LogConfig())
    topics.load()
    for name in ("a", "b"):
        log = topics.create(name, 1).partitions[0].log
        log.append(build_batch([(b"k", b"v")]))
    topics.close()  # clean: both at 1
    assert checkpointed_points(data) == {("a", 0): 1, ("b", 0): 1}
    (timeindex,) = (data / "b-0").glob("*.timeindex")
    timeindex.unlink()
    timeindex.mkdir()  # b cannot be opened

    with pytest.raises(StorageStartError):
        TopicManager(data, LogConfig()).load()
    assert checkpointed_points(data) == {("a", 0): 1, ("b", 0): 1}  # the failed start lost no entry

    degraded = TopicManager(data, LogConfig())
    degraded.load(offline_ok=True)
    degraded.write_recovery_checkpoint()
    degraded.close()
    assert checkpointed_points(data) == {("a", 0): 1, ("b", 0): 1}  # b is offline, not forgotten
