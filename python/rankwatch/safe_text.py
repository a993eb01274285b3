"""Names from outside (file names, job names from records) made safe to print or log: control
characters and undecodable bytes escaped, overlong names shortened. A name printed raw could
clear the screen, move the cursor or start a new line that forges a report or log line."""

from __future__ import annotations

import os
import unicodedata

MAX_NAME_CHARS = 512
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _unsafe(ch: str) -> bool:
    # Cc: C0/C1 controls and DEL; Cs: lone surrogates; Zl/Zp: line and paragraph separators;
    # Cf: format characters such as the bidirectional overrides that reorder what is shown.
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp", "Cf")


def printable(text: str | os.PathLike[str], limit: int | None = MAX_NAME_CHARS) -> str:
    """`text` with unsafe characters escaped (`\\x1b`, `\\n`), cut to about `limit` chars
    (None: never cut, for names that must stay distinct)."""
    s = os.fspath(text)
    if limit is not None and len(s) > limit:
        s = f"{s[:limit]}...({len(s) - limit:,} more chars)"
    if s.isprintable():
        return s
    return "".join(_escape(c) if _unsafe(c) else c for c in s)
