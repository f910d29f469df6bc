"""The RecordBatch v2 format, the bottom layer: what every other layer reads and writes.

- :mod:`.batch`: the batch header, validation, CRC-32C, building and iterating batches;
- :mod:`.control`: control batches, the transaction markers (commit / abort);
- :mod:`.crc`: the CRC-32C function (the crc32c package's C code, loaded without its __init__);
- :mod:`.varint`: Kafka's varints, zigzag and unsigned (the one implementation);
- :mod:`.compression`: the four codecs (gzip, snappy, lz4, zstd);
- :mod:`.decoding`: records decoded for the consumer and Spark, in C (``_crecords.c``) when
  it was built, else in Python;
- :mod:`.encoding`: records appended to the producer's batches, in C when it was built, else
  in Python;
- :mod:`.errors`: what damaged or unsupported bytes raise.

Nothing here does I/O or knows about logs, sockets or brokers: the log stores these bytes,
the wire carries them, the clients build and read them.
"""

from .batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    iter_batches,
    read_header,
    validate_batch,
)
from .control import ControlRecord, ControlType, build_control_batch
from .compression import Compression, CompressionError, compress, decompress
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from .varint import (
    VarintError,
    decode_varint,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    write_uvarint,
    write_varint,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "Compression",
    "CompressionError",
    "ControlRecord",
    "ControlType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatch",
    "TimestampType",
    "UnsupportedMagicError",
    "VarintError",
    "build_batch",
    "build_control_batch",
    "compress",
    "decode_varint",
    "decompress",
    "encode_uvarint",
    "encode_varint",
    "iter_batches",
    "read_header",
    "read_uvarint",
    "validate_batch",
    "write_uvarint",
    "write_varint",
]
