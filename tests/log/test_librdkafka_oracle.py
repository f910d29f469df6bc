"""librdkafka as an oracle: batches it builds (every codec) decode with our RecordBatch."""

from __future__ import annotations

import confluent_kafka
import pytest

from pulllog.records import Compression
from pulllog.log import Log

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_batches_built_by_librdkafka_decode_byte_identical(pulllog_broker, codec: str) -> None:
    topic = f"oracle-{codec}"
    sent = [(b"key-%d" % i, (b"value %d " % i) * (1 + i % 30), [("h", b"%d" % i)]) for i in range(2000)]
    producer = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers,
                                         "compression.type": codec, "linger.ms": 20})
    for key, value, headers in sent:
        producer.produce(topic, value, key=key, headers=headers, partition=0, timestamp=1_700_000_000_000)
    assert producer.flush(30) == 0
    pulllog_broker.stop()  # closes the log cleanly; we read the files it wrote
    log = Log.open(pulllog_broker.data_dir / f"{topic}-0")
    got, codecs = [], set()
    offset = 0
    while offset < log.log_end_offset:
        for batch in log.read_batches(offset):
            codecs.add(batch.header.compression)
            got.extend((r.key, r.value, list(r.headers)) for r in batch.records())
            offset = batch.last_offset + 1
    log.close()
    assert got == [(k, v, h) for k, v, h in sent]
    assert codecs == {Compression.parse(codec)}
