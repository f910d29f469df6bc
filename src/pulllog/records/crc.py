"""CRC-32C (Castagnoli), the checksum of a RecordBatch v2 and of pulllog's snapshot files.

``crc32c(data) -> int`` is the ``crc32c`` package's C function (SSE 4.2 / ARMv8 CRC
instructions where the CPU has them), taken from its extension module directly: the
package's ``__init__`` also imports ``importlib.metadata`` (to read its own version) and
its command line's ``argparse``, some 20 ms of a broker's start for a function it does not
need. Where the extension is not laid out as expected (another version of the package),
the package is imported as usual; either way it is the same C code.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["crc32c"]


def _from_extension() -> Callable[..., int] | None:
    import importlib.machinery
    import importlib.util

    package = importlib.util.find_spec("crc32c")  # finds it without running its __init__
    if package is None or not package.submodule_search_locations:
        return None
    loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    for directory in package.submodule_search_locations:
        spec = importlib.machinery.FileFinder(directory, loader).find_spec("crc32c._crc32c")
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        function = getattr(module, "crc32c", None)
        if callable(function):
            return function  # type: ignore[no-any-return]
    return None


def _load() -> Callable[..., int]:
    try:
        function = _from_extension()
    except (ImportError, OSError):
        function = None
    if function is None:
        from crc32c import crc32c as function
    return function


crc32c: Callable[..., int] = _load()
