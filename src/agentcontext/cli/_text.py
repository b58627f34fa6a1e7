"""Text from the user's files, made safe to print: no control characters, one line when asked."""

from __future__ import annotations

import re

__all__ = ["one_line", "plain", "preview"]

# C0 and C1 control characters and DEL, but not newline or tab (``plain`` keeps them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"[\r\n\t\x0b\x0c\x85\u2028\u2029]+")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group(0)):02x}"


def plain(text: str) -> str:
    """``text`` with control characters (ESC, BEL, backspace, carriage return...) shown as ``\\x1b``-style escapes.

    A terminal would act on them: an escape sequence inside a tool output could
    clear the screen or forge output lines.
    """
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """The first non-empty line of ``text``, stripped and made `plain`."""
    for line in text.strip().splitlines():
        if line.strip():
            return plain(line.strip())
    return ""


def preview(text: str, width: int = 80) -> str:
    """The start of ``text`` on one line: line breaks and tabs become spaces, control characters escapes."""
    flat = _LINE_BREAKS.sub(" ", text[: width * 2]).strip()
    return plain(flat)[:width]
