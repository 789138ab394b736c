"""The provider conformance suite, applied to the ECS provider on its loopback simulator.

Nodes map to instances by name (``node-0000`` -> ``i-node0000``, see
``podnet.plugins.ecs.demo.instance_id_for``) through the provider's ``instance_ids`` config.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException

from podnet.core.errors import ErrorKind
from podnet.plugins.ecs.demo import KIT_POLICY, EcsWorld
from podnet.plugins.ecs.provider import EcsProvider
from podnet.testing.conformance import ProviderConformance

pytest_plugins = ["podnet.testing"]

NODES = 4


def ecs_world(**kwargs: Any) -> EcsWorld:
    """A simulator with instances for the World's nodes 0..NODES-1, and the provider."""
    kwargs.setdefault("policy", KIT_POLICY)
    return EcsWorld(nodes=NODES, **kwargs)


def client_error(code: str, status: int = 400) -> ClientException:
    return ClientException(status_code=status, code=code, message=f"code: {status}, x",
                           data={"Code": code}, request_id="r")


class TestEcsConformance(ProviderConformance):
    provider_name = "ecs"

    @pytest.fixture
    def ecs(self) -> Iterator[EcsWorld]:
        world = ecs_world()
        self.sim_world = world
        yield world
        world.close()

    @pytest.fixture
    def provider_plugin(self, ecs: EcsWorld) -> EcsProvider:
        return ecs.plugin

    @pytest.fixture
    def ground_truth(self, ecs: EcsWorld) -> Any:
        return ecs.addresses

    def cloud_interfaces(self, plugin: Any) -> Mapping[str, str] | None:
        """Every secondary ENI (attached, or detached and not deleted) -> its node."""
        world = self.sim_world
        with world.sim.lock:
            enis = [(e.id, e.instance_id or e.owner or "") for e in world.sim.enis.values()
                    if e.kind == "Secondary"]
        return {eni: world.node_of.get(iid, iid) for eni, iid in enis}

    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:  # pragma: no cover
        raise AssertionError("ground_truth is overridden")

    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        return [
            (client_error("Throttling"), ErrorKind.THROTTLED),
            (client_error("Throttling.User"), ErrorKind.THROTTLED),
            (client_error("InvalidVSwitchId.IpNotEnough", 403), ErrorKind.SUBNET_EXHAUSTED),
            (client_error("InvalidOperation.Ipv4CountExceeded", 403),
             ErrorKind.QUOTA_EXCEEDED),
            (client_error("QuotaExceeded.PrivateIpAddress", 403), ErrorKind.QUOTA_EXCEEDED),
            (client_error("EniPerInstanceLimitExceeded", 403), ErrorKind.QUOTA_EXCEEDED),
            (client_error("InvalidEniId.NotFound", 404), ErrorKind.NOT_FOUND),
            (client_error("InvalidEcsId.NotFound", 404), ErrorKind.NOT_FOUND),
            (client_error("InvalidIp.IpUnassigned"), ErrorKind.NOT_FOUND),
            (client_error("Operation.Conflict", 403), ErrorKind.CONFLICT),
            (client_error("IdempotentFailed"), ErrorKind.CONFLICT),
            (ServerException(status_code=500, code="InternalError", message="x", data={},
                             request_id="r"), ErrorKind.TRANSIENT),
            (client_error("SomethingNew"), ErrorKind.TRANSIENT),
        ]
