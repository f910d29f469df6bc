"""The log cleaner's thread in a real broker: dirty ratio, checkpoint, max lag, live swaps.

Every wait is on the cleaner's state (its pass counter, its history of cleans, its
checkpoint) or on files in the data directory, never on time.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest
from waits import block_until

from pulllog.log.cleaner import CHECKPOINT_FILE, LogCleaner, read_checkpoint
from pulllog.testing import BrokerThread

from test_serve_process import consume_all, serve  # noqa: F401  (serve is a fixture)

HOUR_MS = 3600 * 1000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2000"}


def cleaner_of(broker: BrokerThread) -> LogCleaner:
    assert broker.broker is not None and broker.broker.cleaner is not None
    return broker.broker.cleaner


def create(broker: BrokerThread, topic: str, **configs: str) -> None:
    broker.call(broker.broker.topics.create, topic, 1, {**COMPACT, **configs})


def produce(broker: BrokerThread, topic: str, records: list[tuple[bytes, bytes]], timestamp: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
                                         "batch.num.messages": 5})
    for key, value in records:
        producer.produce(topic, value, key, partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0


def full_pass(broker: BrokerThread) -> None:
    """Wake the cleaner and wait for a pass that began after the wake-up to finish."""
    cleaner = cleaner_of(broker)
    target = cleaner.request_pass()
    block_until(lambda: cleaner.passes >= target, "the cleaner finished a pass")


def segment_files(broker: BrokerThread, topic: str) -> dict[str, tuple[int, int]]:
    directory = broker.data_dir / f"{topic}-0"
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(directory.glob("*.log"))}


def latest_by_key(records: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    return dict(records)


def read_all(broker: BrokerThread, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "check",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes]] = []
    while True:
        msg = consumer.poll(30)
        assert msg is not None, "no end of partition within 30 s"
        if msg.error():
            assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
            break
        out.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return out


def numbered(start: int, count: int, keys: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % (i % keys), b"v%d" % i) for i in range(start, start + count)]


@pytest.fixture
def broker(tmp_path: Path):
    # Passes run only on wake(): a test sees each decision the cleaner makes.
    with BrokerThread(tmp_path / "data", cleaner_backoff_ms=HOUR_MS) as handle:
        yield handle


def test_a_partition_below_the_dirty_ratio_is_not_rewritten(broker: BrokerThread) -> None:
    create(broker, "t")
    first = numbered(0, 300, keys=300)  # all distinct keys: the cleaned log stays as large
    produce(broker, "t", first)
    full_pass(broker)
    assert cleaner_of(broker).cleaned("t", 0) == 1
    before = segment_files(broker, "t")
    del before[max(before)]  # the active segment: appended to

    produce(broker, "t", numbered(300, 40, keys=300))  # dirty: about a tenth of the clean part
    full_pass(broker)

    assert cleaner_of(broker).cleaned("t", 0) == 1
    assert {name: ident for name, ident in segment_files(broker, "t").items() if name in before} == before

    produce(broker, "t", numbered(340, 600, keys=300))  # now mostly dirty
    full_pass(broker)
    assert cleaner_of(broker).cleaned("t", 0) == 2
    (clean,) = [c for c in cleaner_of(broker).history if c.topic_partition == ("t", 0)][-1:]
    assert clean.dirty_ratio >= 0.5 and not clean.forced_by_max_lag


def test_the_filthiest_log_is_cleaned_first(broker: BrokerThread) -> None:
    create(broker, "a")
    create(broker, "b")
    produce(broker, "a", numbered(0, 300, keys=300))
    produce(broker, "b", numbered(0, 300, keys=300))
    full_pass(broker)
    block_until(lambda: cleaner_of(broker).cleaned("a", 0) == cleaner_of(broker).cleaned("b", 0) == 1,
               "both logs were cleaned once")
    produce(broker, "a", numbered(300, 400, keys=300))  # dirty ratio about 0.5
    produce(broker, "b", numbered(300, 900, keys=300))  # dirty ratio about 0.75
    full_pass(broker)
    block_until(lambda: cleaner_of(broker).cleaned("a", 0) == 2, "a was cleaned again")

    last_two = [c.topic_partition for c in cleaner_of(broker).history[-2:]]
    assert last_two == [("b", 0), ("a", 0)]


def test_the_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data, cleaner_backoff_ms=HOUR_MS) as broker:
        create(broker, "t")
        produce(broker, "t", numbered(0, 300, keys=50))
        full_pass(broker)
        assert cleaner_of(broker).cleaned("t", 0) == 1
        checkpoint = cleaner_of(broker).checkpoints[("t", 0)]
        files = segment_files(broker, "t")
    assert checkpoint > 0
    lines = (data / CHECKPOINT_FILE).read_text().splitlines()
    assert lines == ["0", "1", f"t 0 {checkpoint}"]

    with BrokerThread(data, cleaner_backoff_ms=HOUR_MS) as broker:
        assert cleaner_of(broker).checkpoints == {("t", 0): checkpoint}
        full_pass(broker)

        assert cleaner_of(broker).cleaned("t", 0) == 0
        assert segment_files(broker, "t") == files


def test_a_deleted_topic_leaves_the_checkpoint(broker: BrokerThread) -> None:
    create(broker, "t")
    produce(broker, "t", numbered(0, 300, keys=50))
    full_pass(broker)
    assert ("t", 0) in read_checkpoint(broker.data_dir / CHECKPOINT_FILE)

    broker.call(broker.broker.delete_topic, "t")
    full_pass(broker)

    assert read_checkpoint(broker.data_dir / CHECKPOINT_FILE) == {}


def test_max_compaction_lag_forces_a_clean_below_the_ratio(broker: BrokerThread) -> None:
    create(broker, "t", **{"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": str(HOUR_MS)})
    produce(broker, "t", numbered(0, 300, keys=300))
    full_pass(broker)  # everything is dirty the first time: ratio 1
    assert cleaner_of(broker).cleaned("t", 0) == 1
    produce(broker, "t", numbered(300, 200, keys=300))  # recent: below the ratio, not overdue
    full_pass(broker)
    assert cleaner_of(broker).cleaned("t", 0) == 1

    two_hours_ago = int(time.time() * 1000) - 2 * HOUR_MS
    produce(broker, "t", numbered(500, 200, keys=300), timestamp=two_hours_ago)
    full_pass(broker)

    assert cleaner_of(broker).cleaned("t", 0) == 2
    last = cleaner_of(broker).history[-1]
    assert last.forced_by_max_lag and last.dirty_ratio < 0.99


def test_producers_and_consumers_run_while_the_cleaner_swaps(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", cleaner_backoff_ms=1) as broker:
        # Larger segments and a bounded stream keep each clean short on a loaded machine.
        create(broker, "t", **{"min.cleanable.dirty.ratio": "0.01", "segment.bytes": "10000"})
        full_pass(broker)  # the worker process is up before the stream starts
        acked: dict[int, bytes] = {}
        stop = threading.Event()

        def on_delivery(err, msg) -> None:
            assert err is None, err
            acked[msg.offset()] = msg.value()

        def produce_until_stopped() -> None:
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1})
            i = 0
            while not stop.is_set() and i < 30_000:
                producer.produce("t", b"v%d" % i, b"k%d" % (i % 40), partition=0, on_delivery=on_delivery)
                i += 1
                producer.poll(0)
                if i % 200 == 0:
                    producer.flush(30)
            assert producer.flush(30) == 0

        seen: list[list[tuple[int, bytes]]] = []

        def consume_from_the_start_repeatedly() -> None:
            while not stop.is_set():
                seen.append([(o, v) for o, _k, v in read_all(broker, "t")])

        threads = [threading.Thread(target=produce_until_stopped), threading.Thread(target=consume_from_the_start_repeatedly)]
        for thread in threads:
            thread.start()
        try:
            block_until(lambda: cleaner_of(broker).cleaned("t", 0) >= 5, "the cleaner cleaned 5 times", timeout_s=120)
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        assert cleaner_of(broker).errors == 0
        final = read_all(broker, "t")

    # Every record a consumer saw is the one produced at that offset, in offset order.
    for reading in seen + [[(o, v) for o, _k, v in final]]:
        offsets = [o for o, _ in reading]
        assert offsets == sorted(set(offsets))
        assert all(acked[o] == v for o, v in reading)
    # Nothing the compacted log must keep was lost: the latest value of every key.
    latest: dict[bytes, tuple[int, bytes]] = {}
    for offset in sorted(acked):
        value = acked[offset]
        latest[b"k%d" % (int(value[1:]) % 40)] = (offset, value)
    final_by_key = {k: (o, v) for o, k, v in final}
    assert final_by_key == latest
    assert len(final) < len(acked)


def test_sigkill_in_the_middle_of_cleaning_loses_nothing(serve, tmp_path: Path) -> None:  # noqa: F811
    process = serve(overrides=("log.cleaner.backoff.ms=10",))
    bootstrap = f"127.0.0.1:{process.port}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": str(8 << 20), "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([confluent_kafka.admin.NewTopic("kill", 1, 1, config=config)])["kill"].result(30)
    directory = process.data_dir / "kill-0"
    produced: dict[int, bytes] = {}  # offset -> value, of acknowledged records
    acked: dict[bytes, int] = {}  # key -> offset of its latest acknowledged record

    def on_delivery(err, msg) -> None:
        if err is None:
            produced[msg.offset()] = msg.value()
            acked[msg.key()] = max(acked.get(msg.key(), -1), msg.offset())

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "retries": 0,
                                         "message.timeout.ms": 5000})
    value = b"x" * 1000
    i = 0

    def cleaning_in_progress() -> bool:
        return any(p.suffix in (".cleaned", ".swap") for p in directory.iterdir())

    while not cleaning_in_progress():
        assert i < 2_000_000, "never saw the cleaner at work"
        try:
            producer.produce("kill", value + b"%d" % i, b"k%d" % (i % 5000), partition=0, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        i += 1
        producer.poll(0)
    assert process.signal(signal.SIGKILL) == -signal.SIGKILL  # while a .cleaned or .swap file exists
    # The files the kill left, by inode: the restarted broker's cleaner may start a pass of its own
    # at once (the backoff only spaces passes), and its new files are not leftovers.
    left = _inodes(directory)
    producer.flush(10)  # what was in flight fails: never acknowledged

    serve(process.port, overrides=("log.cleaner.backoff.ms=3600000",))
    got = consume_all(bootstrap, "kill", 1)[0]
    offsets = [o for o, _ in got]
    assert offsets == sorted(set(offsets))
    latest: dict[bytes, int] = {}
    for offset, v in got:
        assert produced.get(offset, v) == v  # an acknowledged offset holds what was sent there
        latest[b"k%d" % (int(v[1000:]) % 5000)] = offset
    for key, offset in acked.items():
        assert latest.get(key, -1) >= offset, f"the latest acknowledged record of {key!r} is gone"
    assert not _inodes(directory) & left  # recovery removed them


def _inodes(directory: Path) -> set[tuple[str, int]]:
    """(name, inode) of the cleaner's .cleaned and .swap files in a partition's directory."""
    found = set()
    for path in directory.iterdir():
        if path.suffix in (".cleaned", ".swap"):
            try:
                found.add((path.name, path.stat().st_ino))
            except FileNotFoundError:  # renamed or removed since the listing
                pass
    return found


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie nobody reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return out


def test_the_cleaner_works_in_a_worker_process_the_broker_stops(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", cleaner_backoff_ms=HOUR_MS) as broker:
        create(broker, "t")
        produce(broker, "t", numbered(0, 300, keys=50))
        full_pass(broker)
        assert cleaner_of(broker).cleaned("t", 0) == 1
        worker = cleaner_of(broker).worker.pid
        assert worker is not None and worker != os.getpid() and running(worker)
        assert worker in children(os.getpid())
    assert not running(worker)  # stopped and joined with the broker


def test_a_killed_worker_is_replaced(broker: BrokerThread) -> None:
    create(broker, "t")
    produce(broker, "t", numbered(0, 300, keys=50))
    full_pass(broker)
    full_pass(broker)  # a pass with nothing to clean: the thread now waits, no request is in flight
    first = cleaner_of(broker).worker.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    block_until(lambda: not cleaner_of(broker).worker.alive, "the broker saw its worker die")

    produce(broker, "t", numbered(300, 300, keys=50))
    full_pass(broker)

    assert cleaner_of(broker).cleaned("t", 0) == 2
    assert cleaner_of(broker).errors == 0
    assert cleaner_of(broker).worker.pid not in (None, first)


def test_the_worker_exits_when_the_broker_is_killed(serve) -> None:  # noqa: F811
    process = serve(overrides=("log.cleaner.backoff.ms=10",))
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{process.port}"})
    topic = confluent_kafka.admin.NewTopic("c", 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])["c"].result(30)
    assert process.proc is not None
    (worker,) = block_until(lambda: children(process.proc.pid), "the broker started its cleaner worker")

    assert process.signal(signal.SIGKILL) == -signal.SIGKILL

    block_until(lambda: not running(worker), "the orphaned worker exited")


def test_retention_deletes_are_unlinked_by_the_cleaner_thread(broker: BrokerThread) -> None:
    broker.call(broker.broker.topics.create, "r", 1, {"segment.bytes": "2000", "retention.bytes": "3000"})
    produce(broker, "r", numbered(0, 300, keys=300))
    full_pass(broker)  # the thread has seen the log: from now on its deletes are deferred
    directory = broker.data_dir / "r-0"
    segments = len(list(directory.glob("*.log")))

    assert broker.call(broker.broker.run_retention) > 0
    full_pass(broker)

    assert len(list(directory.glob("*.log"))) < segments
    assert not list(directory.glob("*.deleted"))


def test_preallocate_true_is_refused_with_invalid_config(broker: BrokerThread) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = confluent_kafka.admin.NewTopic("p", 1, 1, config={"preallocate": "true"})
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        admin.create_topics([topic])["p"].result(30)
    error = failure.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "preallocate" in error.str()
