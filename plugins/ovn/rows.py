"""Names podnet gives its rows in the Northbound database (no ovsdbapp import here, so
the provider module loads even where ovsdbapp is missing and says so when first used)."""

from __future__ import annotations

__all__ = ["GROUPS", "KEY", "OWNER", "OWNER_VALUE"]

#: external_ids key naming the PodNetwork record a row belongs to
KEY = "podnet/key"
OWNER = "podnet/owner"
OWNER_VALUE = "podnet"
#: the port groups podnet put a port in, comma-separated, on the port
GROUPS = "podnet/groups"
