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
