"""Escaping of external strings before they reach a terminal, a text report or an XML document.

A backend's error message, an ONNX operator or tensor name, a file name or a case name read from disk is text
the project did not write: it may hold terminal escape sequences (``ESC [31m`` recolours the terminal, ``ESC ]``
sets its title), NUL and other C0 / C1 control characters (JUnit XML 1.0 cannot hold them at all, so one such
character made the whole report unparseable), or lone UTF-16 surrogates (which cannot be encoded as UTF-8: the
``print`` or the file write raised).  :func:`escape_text` is the one function every sink uses
(:mod:`pldr_ref.harness.report` table and JUnit XML, the one-line errors of :mod:`pldr_ref.tool_cli`): each such
character becomes a visible backslash escape (``\\x1b``, ``\\x00``, ``\\ud800``), everything else -- printable
ASCII, accents, CJK, emoji -- is kept.
"""

from __future__ import annotations

import re

#: Characters escaped everywhere: C0 controls except tab and newline, DEL, C1 controls, lone surrogates, and the
#: two non-characters XML 1.0 excludes (U+FFFE, U+FFFF).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
#: With ``one_line=True`` tab and newline are escaped too (an error line stays one line).
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


#: Characters with a short escape.
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    """``\\n``, ``\\t``, ``\\r``; else ``\\xHH`` below U+0100, else ``\\uHHHH``."""
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: object, *, one_line: bool = False) -> str:
    """``str(text)`` with every control character, lone surrogate and XML-excluded non-character replaced by
    its backslash escape; tab and newline are kept unless ``one_line`` (then they are escaped as well).

    The result is safe to print on a terminal, to encode as UTF-8 and to place in XML 1.0 text or attributes.
    """
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_escape_char, str(text))
