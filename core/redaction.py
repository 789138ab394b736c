"""Credentials hidden from text podnet writes anywhere: spans, logs, conditions, Events.

Standard library only, so every module (the error helpers providers use included) can
hide credentials without importing the tracing stack.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["redact"]

_REDACTED: Final = "[REDACTED]"

# Ordered: an Authorization value runs to the end of the line (scheme and credentials),
# so it goes first; the generic key=value rule then catches signed query parameters,
# SDK debug dumps (`'AccessKeySecret': 'x'`) and JSON bodies.
_REDACT_RULES: Final = (
    (
        re.compile(r"""(\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?)[^\r\n"']+""", re.I),
        r"\g<1>" + _REDACTED,
    ),
    (
        re.compile(
            r"""(\b(?:AccessKey|\w*(?:secret|password|passwd|token|credential))\w*"""
            r"""["']?\s*[:=]\s*["']?)[^\s"',;&)}\]]+""",
            re.I,
        ),
        r"\g<1>" + _REDACTED,
    ),
    # user:password@ in URLs
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), r"\g<1>" + _REDACTED + "@"),
)


def redact(text: str) -> str:
    """Hide credential values (access keys, secrets, passwords, tokens, Authorization)."""
    for pattern, replacement in _REDACT_RULES:
        text = pattern.sub(replacement, text)
    return text
