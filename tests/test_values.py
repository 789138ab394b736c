"""``podnet.core.values.evolve`` gives what ``attrs.evolve`` gives."""

from __future__ import annotations

import attrs
import pytest

from podnet.core.models import (
    Condition,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
    PoolBounds,
)
from podnet.core.values import evolve


@attrs.frozen
class _One:
    value: int = attrs.field(validator=attrs.validators.instance_of(int))


@attrs.frozen(kw_only=True)
class _Named:
    first: int
    second: str = "s"


@attrs.frozen
class _Private:
    _hidden: str
    shown: str = "x"
    derived: str = attrs.field(init=False, default="d")


def test_evolve_matches_attrs_evolve() -> None:
    pn = PodNetwork(metadata=ObjectMeta(name="a", namespace="ns", labels={"k": "v"}),
                    spec=PodNetworkSpec(pod_name="p", pod_uid="u", node_name="n",
                                        provider="reference"))
    status = PodNetworkStatus(phase=Phase.ROUTED, ip="10.0.0.5", conditions=(
        Condition(type="Ready", status="True"),))
    cases = [
        (pn, {"status": status}),
        (pn.metadata, {"resource_version": "7"}),
        (status, {"phase": Phase.ALLOCATED, "ip": None}),
        (status, {}),
        (PoolBounds(min_idle=1), {"max_idle": 3}),
        (_One(1), {"value": 2}),
        (_Private("h"), {"hidden": "other"}),
        (_Named(first=1), {"second": "t"}),
        (_Named(first=1), {}),
    ]
    for inst, changes in cases:
        ours, theirs = evolve(inst, **changes), attrs.evolve(inst, **changes)
        assert ours == theirs and type(ours) is type(theirs)
        assert ours is not inst


def test_evolve_runs_the_validators() -> None:
    with pytest.raises(TypeError):
        evolve(_One(1), value="two")
    with pytest.raises(TypeError):
        evolve(_One(1), unknown=3)
