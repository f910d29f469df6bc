"""asyncio for ``pulllog serve``, imported without :mod:`ssl` (``pulllog.cli.serve`` imports
this module before asyncio).

asyncio imports ssl at import time, for TLS transports; loading ssl (and OpenSSL with it) is
a twentieth of a broker's start, and the broker has no TLS listener. So while asyncio is
imported here, ``ssl`` is shown to it as absent (``None`` in ``sys.modules`` makes that import
fail, which asyncio handles), and then made importable again: asyncio's own TLS is off in
this process (``ssl=`` arguments raise), anything else (uvloop) imports ssl as usual. Where
asyncio or ssl is already imported (a test process, an embedding application) nothing changes.
"""

from __future__ import annotations

import sys

if "asyncio" not in sys.modules and "ssl" not in sys.modules:
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]
