"""The installed podnet's version, one rule for every place that says it (``--version``,
``build_info`` metrics, a built-in plugin's version)."""

from __future__ import annotations

import importlib.metadata

#: a source tree never installed (a valid version, lower than any release)
UNKNOWN = "0+unknown"


def podnet_version() -> str:
    """The installed distribution's version (the one ``pip`` shows), else :data:`UNKNOWN`."""
    try:
        return importlib.metadata.version("podnet")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return UNKNOWN
