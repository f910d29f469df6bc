"""Whether pulllog's optional C extensions may be used.

``PULLLOG_NO_EXTENSIONS`` set to anything but empty or ``0`` switches every one of them off
(setup.py lists them), so the pure-Python code runs alone: how the tests check that code on a
machine where the extensions are built. Each module that has a C twin asks this once, at import.
"""

from __future__ import annotations

import os


def extensions_disabled() -> bool:
    """True when ``PULLLOG_NO_EXTENSIONS`` asks for the pure-Python code only."""
    return os.environ.get("PULLLOG_NO_EXTENSIONS", "") not in ("", "0")
