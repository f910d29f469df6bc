"""Examples at the end of every command's ``--help``.

Click rewraps epilog paragraphs; a paragraph that starts with ``\\b`` is printed as written, so
each example keeps its own line and can be copied into a shell.
"""

from __future__ import annotations

__all__ = ["examples"]


def examples(*commands: str) -> str:
    """An epilog listing ``commands``, one per line, under "Examples:"."""
    return "\b\nExamples:\n" + "\n".join(f"  {command}" for command in commands)
