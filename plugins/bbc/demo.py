"""The BBC provider on its loopback simulator, for ``podnet demo --provider bbc`` and tests.

:data:`DEMO` is what the demo runs (see :mod:`podnet.hookspecs.demo`): :func:`build`
starts the simulator and returns the plugin, the cloud's ground truth (address -> node
name), its call counts, and ``setup_node`` which turns a demo Node object into a BBC node
(instance-type label, providerID) and registers its instance in the simulator.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from typing import Any

from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings
from podnet.plugins.bbc.provider import DEFAULT_TYPE_LABEL, BbcProvider, default_policy
from podnet.plugins.bbc.sim import WRITE_APIS, BbcSimulator

__all__ = ["DEMO", "WRITE_APIS", "build", "min_calls"]

#: the demo's subnets: the ENIs' own, and a second candidate
SUBNETS = {"sbn-demo-a": "10.128.0.0/14", "sbn-demo-b": "10.132.0.0/14"}
PRIMARY_SUBNET = "sbn-demo-a"
#: their IPv6 CIDRs (an instance's IPv6 addresses come from its ENI's subnet's)
SUBNETS_V6 = {"sbn-demo-a": "fd00:bbc:a::/64", "sbn-demo-b": "fd00:bbc:b::/64"}
#: simulator credentials: it never checks signatures
DEMO_AK, DEMO_SK = "demo-ak", "demo-sk"


def start_simulator(*, latency: float = 0.0, rate: float | None = None,
                    fault_rate: float = 0.0, seed: int = 0) -> BbcSimulator:
    sim = BbcSimulator(latency=latency, rate=rate, fault_rate=fault_rate, seed=seed)
    for subnet, cidr in SUBNETS.items():
        sim.add_subnet(subnet, cidr, ipv6_cidr=SUBNETS_V6.get(subnet))
    return sim.start()


def instance_of(node_name: str) -> str:
    """The simulated instance id of a demo node: its name."""
    return node_name


def provider_for(sim: BbcSimulator, *, ip_cap: int = 40, **kwargs: Any) -> BbcProvider:
    return BbcProvider(endpoint=sim.endpoint, access_key_id=DEMO_AK,
                       secret_access_key=DEMO_SK, max_ips_per_node=ip_cap, **kwargs)


def register_nodes(sim: BbcSimulator, names: list[str], ip_cap: int = 40) -> None:
    for name in names:
        sim.add_instance(instance_of(name), PRIMARY_SUBNET, ip_cap)


def build(settings: DemoSettings, *, ip_cap: int = 40) -> DemoCloud:
    """The simulator, in-process on loopback HTTP until exit, with its instances holding
    at most ``ip_cap`` addresses each; ``settings``' latency, fault rate and seed apply.

    The client-side rate limit (``--cloud-rate``) is core's token bucket, set by the
    demo through the policy; the simulator itself is not rate-limited here.
    """
    sim = start_simulator(latency=settings.cloud_latency_ms / 1000,
                          fault_rate=settings.fault_rate, seed=settings.seed)
    plugin = provider_for(sim, ip_cap=ip_cap)
    plugin.simulator = sim  # type: ignore[attr-defined]  # kept alive with the plugin

    def setup_node(node: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(node)
        meta = out.setdefault("metadata", {})
        name = str(meta["name"])
        meta.setdefault("labels", {})[DEFAULT_TYPE_LABEL] = "BBC"
        out.setdefault("spec", {})["providerID"] = f"cce://{instance_of(name)}"
        sim.add_instance(instance_of(name), PRIMARY_SUBNET, ip_cap)
        return out

    def calls() -> Counter[str]:
        return Counter(sim.calls)

    return DemoCloud(plugin, sim.addresses, calls, setup_node, attached=sim.attached)


def min_calls(pods_per_node: Sequence[int]) -> dict[str, tuple[int, bool]]:
    """The fewest calls a perfect controller could make for this burst, per API, and
    whether each is a write: one vpcPort read per node, and batchAddIp in full batches of
    the policy's largest batch."""
    per_call = default_policy().max_batch_size
    return {
        "batchAddIp": (sum(-(-p // per_call) for p in pods_per_node if p), True),
        "vpcPort": (len(pods_per_node), False),
    }


#: the demo's Subnet object: the instances' own subnet (their ENIs' addresses come from it)
SUBNET_OBJECTS: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "bbc-demo"},
     "spec": {"provider": "bbc", "cidrBlock": SUBNETS[PRIMARY_SUBNET], "default": True,
              "parameters": {"subnetIds": [PRIMARY_SUBNET]}}},
)

DEMO = DemoProvider(build, write_apis=WRITE_APIS, min_calls=min_calls,
                    subnets=SUBNET_OBJECTS)
