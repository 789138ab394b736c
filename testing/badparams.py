"""Bad provider parameters of a Subnet (``spec.parameters``), for any provider's
``podnet_subnet_parameters``: each case must be refused with an ``InvalidRequest`` whose
field is the parameter's path and whose message names the Subnet; the provider's suite
then checks that nothing was made and that its other Subnets keep serving.

A provider's test module lists its cases and calls :func:`refused` for each::

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
    def test_bad_parameters(plugin, case):
        refused(plugin, "ovn", case)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

import attrs

from podnet.hookspecs.errors import InvalidRequest
from podnet.hookspecs.networks import SubnetInfo

__all__ = ["BadParameters", "refused", "subnet_info"]


@attrs.frozen
class BadParameters:
    """One malformed ``spec.parameters`` (on a Subnet of ``cidrs`` excluding
    ``excluded``): ``field`` is the error's field, ``message`` a part of its message."""

    id: str
    parameters: Any
    field: str
    message: str
    cidrs: tuple[str, ...] = ("10.60.0.0/24",)
    excluded: tuple[str, ...] = ()


def subnet_info(name: str, provider: str, cidrs: tuple[str, ...],
                parameters: Mapping[str, Any] | Any = None, excluded: tuple[str, ...] = ()
                ) -> SubnetInfo:
    """A Subnet as core hands it over: each block's first host its gateway."""
    gateways = tuple(str(ipaddress.ip_network(c).network_address + 1) for c in cidrs)
    return SubnetInfo(name=name, provider=provider, cidrs=cidrs, gateways=gateways,
                      excluded=excluded, parameters={} if parameters is None else parameters)


def refused(plugin: Any, provider: str, case: BadParameters, name: str = "bad"
            ) -> InvalidRequest:
    """Call ``podnet_subnet_parameters`` with the case and check its refusal."""
    info = subnet_info(name, provider, case.cidrs, case.parameters, case.excluded)
    try:
        plugin.podnet_subnet_parameters(provider=provider, subnet=info)
    except InvalidRequest as exc:
        assert exc.field == case.field, f"{case.id}: field {exc.field!r}, wants {case.field!r}"
        assert f"Subnet {name}" in str(exc), f"{case.id}: {exc} does not name the Subnet"
        assert case.message in str(exc), f"{case.id}: {exc} does not say {case.message!r}"
        return exc
    raise AssertionError(f"{case.id}: {case.parameters!r} was accepted")
