"""Provider config sections: defined and read in :mod:`podnet.hookspecs.sections`, the
provider contract, and re-exported here for core's own modules. Providers import them
from ``podnet.hookspecs.sections`` only."""

from __future__ import annotations

from podnet.hookspecs.sections import (
    at_least,
    between,
    cidrs,
    config_key,
    ids,
    invalid,
    one_of,
    read_section,
    rule,
    section,
    text,
)

__all__ = [
    "at_least",
    "between",
    "cidrs",
    "config_key",
    "ids",
    "invalid",
    "one_of",
    "read_section",
    "rule",
    "section",
    "text",
]
