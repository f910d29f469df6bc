"""A broker process that SIGKILLs itself after its N-th transaction marker (argv: data dir,
port, N): the crash between markers of tests/txn/test_transaction_crashes.py. It prints
"ready" once it listens. The hook wraps the one function that writes a partition's marker
(broker/txn_markers.py); nothing else differs from a normal broker."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from pulllog.broker import Broker
from pulllog.broker import txn_markers


def main() -> None:
    data_dir, port, kill_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    write_one = txn_markers._write_one
    written = 0

    def write_then_maybe_die(*args: Any) -> Any:
        nonlocal written
        code = write_one(*args)
        written += 1
        if written == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return code

    txn_markers._write_one = write_then_maybe_die  # type: ignore[assignment]

    async def serve() -> None:
        async with Broker(data_dir=data_dir, port=port):
            print("ready", flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
