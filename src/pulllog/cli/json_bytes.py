"""How every ``--json`` / ``--format json`` output writes keys, values and header values.

One representation for ``consume --format json`` and ``inspect segment --json``, chosen so
``jq`` reads the common case directly:

    null                    the record has no key / value (a tombstone's value)
    "text"                  the bytes are valid UTF-8
    {"base64": "/wD+"}      anything else, base64-encoded
"""

from __future__ import annotations

import base64

__all__ = ["json_bytes"]


def json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
