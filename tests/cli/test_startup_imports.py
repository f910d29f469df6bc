"""What `pulllog serve` imports before it serves: only what serving needs (start-up time and
resident memory are compared with Kafka's in the README). Each check runs in a fresh
interpreter, since this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"],
                         check=True, capture_output=True, text=True, timeout=120)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_cli_imports_a_command_only_when_it_runs() -> None:
    loaded = _modules_after("import pulllog.cli.main")
    assert not {m for m in loaded if m.startswith(("pulllog.client", "pulllog.broker", "pulllog.spark", "kio", "rich"))}
    assert "pulllog.cli.consume" not in loaded and "pulllog.cli.serve" not in loaded


def test_a_broker_built_by_serve_loads_no_client_no_hypothesis_and_kio_schemas_on_demand(tmp_path: Path) -> None:
    loaded = _modules_after(
        "from pulllog.cli.serve import _load_broker\n"
        "from pathlib import Path\nfrom pulllog.broker.config import BrokerConfig\n"
        f"broker = _load_broker()(config=BrokerConfig.load({{}}, data_dir=Path({str(tmp_path)!r})))\n")
    assert "pulllog.broker.broker" in loaded
    assert not {m for m in loaded if m.startswith(("pulllog.client", "pulllog.spark", "hypothesis"))}
    # A version no client has sent yet is not imported: its codec is built on its first request.
    assert "kio.schema.fetch.v4.request" not in loaded
    assert "kio.schema.list_offsets.v1.request" not in loaded


def test_a_broker_built_by_serve_does_not_build_the_zigzag_table(tmp_path: Path) -> None:
    # records.varint's ZIGZAG table (16k bytes objects, ~10 ms) is built when an encoder first
    # asks for it, not when serve imports the record reader.
    code = ("from pulllog.cli.serve import _load_broker\n"
            "from pathlib import Path\nfrom pulllog.broker.config import BrokerConfig\n"
            f"broker = _load_broker()(config=BrokerConfig.load({{}}, data_dir=Path({str(tmp_path)!r})))\n"
            "import sys\nv = sys.modules['pulllog.records.varint']\nprint('ZIGZAG' in vars(v))\n"
            "assert v.encode_varint(300) == bytes([0xD8, 0x04]) and v.ZIGZAG[300] == bytes([0xD8, 0x04])\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines()[-1] == "False"


# What a broker has imported once it serves (the block of ``async with Broker``), started as
# ``pulllog serve`` starts one: serve's module first (asyncio without ssl), its log handler
# at --log-level warning, the broker from _load_broker.
_SERVING = """
import json, sys
from pathlib import Path
from pulllog.cli.serve import _load_broker, _setup_logging
import asyncio
from pulllog.broker.config import BrokerConfig

async def serving(data_dir):
    broker = _load_broker()(config=BrokerConfig.load({{}}, data_dir=Path(data_dir), port=0, kafka_defaults=True))
    async with broker:
        {while_serving}
        return sorted(m for m, v in sys.modules.items() if v is not None)

_setup_logging("warning")
print(json.dumps(asyncio.run(serving({data_dir!r}))))
"""


def _modules_when_serving(data_dir: Path, while_serving: str = "pass") -> set[str]:
    code = _SERVING.format(data_dir=str(data_dir), while_serving=while_serving)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_a_fresh_broker_serves_before_importing_the_group_coordinator_faults_rich_ssl_or_crc32cs_init(
        tmp_path: Path) -> None:
    loaded = _modules_when_serving(tmp_path)
    assert "pulllog.broker.server" in loaded
    # built with the first group request / the first injected fault / the first log record
    assert "pulllog.group.coordinator" not in loaded
    assert not {m for m in loaded if m.startswith(("pulllog.txn", "pulllog.broker.handlers."))}
    assert "pulllog.broker.faults" not in loaded
    # A single broker (no zookeeper.connect) loads nothing of the cluster, nor its ZooKeeper client.
    assert not {m for m in loaded if m.startswith(("pulllog.cluster", "kazoo"))}
    assert not {m for m in loaded if m == "rich" or m.startswith("rich.")}
    # asyncio's TLS (the broker has no TLS listener), and the crc32c package's __init__
    # (importlib.metadata, argparse) for its one C function
    assert "ssl" not in loaded and "_ssl" not in loaded
    assert "crc32c" not in loaded and "importlib.metadata" not in loaded


def test_serve_leaves_ssl_importable_and_a_first_fault_or_group_request_builds_what_it_needs(tmp_path: Path) -> None:
    loaded = _modules_when_serving(tmp_path, while_serving=(
        "import ssl; assert ssl.OPENSSL_VERSION\n"
        "        assert not broker.faults and not broker.faults.rules\n"
        "        rule = broker.faults.observe(3)\n"
        "        assert broker.faults and broker.faults.rules == [rule]\n"
        "        assert broker.groups.list_groups.__self__ is broker.groups"))
    assert {"ssl", "pulllog.broker.faults", "pulllog.group.coordinator"} <= loaded


def test_a_broker_with_consumer_offsets_on_disk_loads_its_groups_before_it_serves(tmp_path: Path) -> None:
    commit = ("from pulllog.group.coordinator import OffsetCommit, OffsetCommitRequest\n"
              "        broker.topics.create('orders', 1)\n"
              "        result = broker.groups.commit_offsets(OffsetCommitRequest(\n"
              "            'billing', -1, '', None, (OffsetCommit('orders', 0, 42, -1, 'm'),)))\n"
              "        assert [p.error for p in result.partitions] == [0]")
    _modules_when_serving(tmp_path, while_serving=commit)
    # Restarted: the groups are in memory before the first request (not read on demand).
    loaded = _modules_when_serving(tmp_path, while_serving=(
        "assert broker._groups is not None and set(broker._groups.groups) == {'billing'}\n"
        "        assert broker._groups.groups['billing'].offsets[('orders', 0)].offset == 42"))
    assert "pulllog.group.coordinator" in loaded


def test_a_fresh_brokers_first_request_at_an_unserved_api_versions_version_is_answered(tmp_path: Path) -> None:
    # ApiVersions' handler is imported with the first request that needs it; one at a version
    # outside the served range is still answered UNSUPPORTED_VERSION (KIP-511), not dropped.
    loaded = _modules_when_serving(tmp_path, while_serving=(
        "import struct\n"
        "        assert 'pulllog.broker.handlers.api_versions' not in sys.modules\n"
        "        reader, writer = await asyncio.open_connection('127.0.0.1', broker.port)\n"
        "        writer.write(struct.pack('>ihhih', 10, 18, 99, 42, -1))\n"
        "        size, = struct.unpack('>i', await reader.readexactly(4))\n"
        "        frame = await reader.readexactly(size)\n"
        "        assert struct.unpack_from('>ih', frame) == (42, 35)\n"
        "        writer.close()"))
    assert "pulllog.broker.handlers.api_versions" in loaded
    assert "pulllog.broker.handlers.fetch" not in loaded
