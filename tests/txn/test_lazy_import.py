"""A broker that never sees a transaction does not import the transaction coordinator: not
when it is built, not when it starts (start-up time is compared with Kafka's in the README).
A fresh interpreter, since this test process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_CODE = """
import asyncio, sys
from pulllog.broker import Broker

async def main():
    async with Broker(data_dir=sys.argv[1], port=0):
        pass

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("pulllog.txn")))
"""


def test_a_broker_without_transactions_never_imports_txn(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _CODE, str(tmp_path)], check=True, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.splitlines()[-1] == "[]"
