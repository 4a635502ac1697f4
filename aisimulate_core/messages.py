"""One problem, one line: user text shown in a message can neither break nor forge a line.

Error messages quote user values (a payload string, a file name, a provider name). A terminal,
a log collector or ``str.splitlines`` ends a line not only at ``\\n`` but at ``\\r``, U+0085,
U+2028, U+2029 and the other separators, so a value holding one could split a problem in two
and make the second half look like a problem of its own. Every such character is written as
an escape instead, as JSON would write it.
"""

from __future__ import annotations

import re

# C0 and C1 controls (\n \r \v \f \x1c-\x1e \x85 among them), line and paragraph separators,
# and the bidirectional overrides and isolates, which can make a line display as another.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control, line-separator and bidi character written as an escape
    (``\\n``, ``\\u2028``); printable text, including non-ASCII letters, is left as it is."""
    return _UNSAFE.sub(_escape, text)


def problem_lines(message: str) -> list[str]:
    """The lines of a (possibly multi-problem) message, each safe to print as one line.

    Only ``\\n`` separates problems: messages join their problems with it. Any other separator
    is part of a value that escaped quoting, so it is escaped here rather than split on.
    """
    return [escape_controls(line) for line in message.split("\n")]
