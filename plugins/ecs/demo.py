"""The ECS provider on its loopback simulator, in-process over HTTP (the real SDK path):
for ``podnet demo --provider ecs`` and for tests.

Nodes are mapped to instances by name: node ``node-0001`` is instance ``i-node0001``
(:func:`instance_id_for`). :data:`DEMO` is what the demo runs (see
:mod:`podnet.hookspecs.demo`): :func:`build` returns a ``setup_node`` that writes the
instance id into the Node's ``spec.providerID`` (``<region>.<instance id>``, the Alibaba
Cloud controller manager's form) and registers the instance in the simulator.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings
from podnet.hookspecs.policy import PoolPolicy
from podnet.plugins.ecs.provider import POLICY, EcsProvider
from podnet.plugins.ecs.sim import INSTANCE_TYPES, EcsSimulator

REGION = "cn-hangzhou"
INSTANCE_TYPE = "ecs.g7.large"
#: the demo's nodes: 8 ENIs of 30 addresses, a common Terway node size (7 secondary ENIs of
#: 29 pod addresses; g7.large holds 18 pods at most: pods never go on the primary ENI, and
#: an ENI create is 2 calls)
DEMO_INSTANCE_TYPE = "ecs.g7.4xlarge"
#: the simulator's vSwitches: a big one, and a second one for fail-over
VSWITCHES = {"vsw-sim-a": "10.0.0.0/16", "vsw-sim-b": "10.1.0.0/16"}
#: their IPv6 CIDRs, for dual-stack worlds (``EcsWorld(ipv6=True)``)
VSWITCHES_V6 = {"vsw-sim-a": "2408:4005:300:a00::/64", "vsw-sim-b": "2408:4005:300:b00::/64"}
SECURITY_GROUPS = ("sg-sim-1",)
#: the APIs that change the cloud (GOALS P1 counts these per pod)
WRITE_APIS = ("AssignPrivateIpAddresses", "UnassignPrivateIpAddresses",
              "CreateNetworkInterface", "AttachNetworkInterface", "DetachNetworkInterface",
              "DeleteNetworkInterface", "ModifyNetworkInterfaceAttribute",
              "AssignIpv6Addresses", "UnassignIpv6Addresses")
#: the provider's policy for the test kit's scenarios, which settle without moving the
#: clock (no 300 ms gathering wait) and expect a warm pool (Terway keeps none idle)
KIT_POLICY = attrs.evolve(POLICY, aggregation_window=0.0, min_idle=2)


def node_name(i: int) -> str:
    """The name core's demo (and the test kit's World) gives node ``i``."""
    return f"node-{i:04d}"


def instance_id_for(node_name: str) -> str:
    return "i-" + "".join(ch for ch in node_name if ch.isalnum())


def provider_config(sim: EcsSimulator, **overrides: Any) -> dict[str, Any]:
    """The provider's config section for a simulator (dummy credentials: the simulator
    never checks signatures)."""
    config: dict[str, Any] = {
        "endpoint": sim.endpoint, "protocol": "http", "region": REGION,
        "access_key_id": "sim-access-key", "access_key_secret": "sim-secret",
        "vswitches": list(sim.vswitches), "security_groups": list(SECURITY_GROUPS),
        "instance_type": INSTANCE_TYPE, "poll_interval": 0.001,
    }
    config.update(overrides)
    return config


class EcsWorld:
    """A started simulator and a configured provider talking to it: ``vswitches_in_cloud``
    (id -> CIDR) are the simulator's; ``ipv6`` gives them IPv6 CIDRs (``ipv6_cidrs``, id
    -> CIDR, else :data:`VSWITCHES_V6` or a made-up one); ``auth`` / ``secret_of`` have
    it check each request's key, token and signature (:class:`EcsSimulator`); ``config``
    overrides the provider's section (its ``vswitches`` default to all of them)."""

    def __init__(self, *, nodes: int = 0, latency: float = 0.0,
                 rate: float | Mapping[str, float] | None = None, fault_rate: float = 0.0,
                 seed: int = 0, vswitches_in_cloud: Mapping[str, str] | None = None,
                 policy: PoolPolicy | None = None, ipv6: bool = False,
                 ipv6_cidrs: Mapping[str, str] | None = None,
                 auth: Callable[[str, str | None], str] | None = None,
                 secret_of: Callable[[str], str | None] | None = None,
                 **config: Any) -> None:
        self.sim = EcsSimulator(latency=latency, rate=rate, fault_rate=fault_rate, seed=seed,
                                auth=auth, secret_of=secret_of)
        for i, (vid, cidr) in enumerate((vswitches_in_cloud or VSWITCHES).items()):
            v6 = None
            if ipv6 or ipv6_cidrs:
                v6 = ({**VSWITCHES_V6, **(ipv6_cidrs or {})}.get(vid)
                      or f"2408:4005:300:{0xf00 + i:x}::/64")
            self.sim.add_vswitch(vid, cidr, ipv6_cidr=v6)
        self.sim.start()
        self.plugin = EcsProvider(policy=policy)
        self.node_of: dict[str, str] = {}
        self._lock = threading.Lock()
        names = [node_name(i) for i in range(nodes)]
        if names:
            ids = {n: instance_id_for(n) for n in names}
            ids.update(config.pop("instance_ids", {}))
            config["instance_ids"] = ids
        self.config = provider_config(self.sim, **config)
        self.plugin.podnet_configure("ecs", self.config)
        for name in names:
            self.add_node(name)

    def add_node(self, node_name: str, instance_type: str = INSTANCE_TYPE) -> str:
        iid = instance_id_for(node_name)
        with self._lock:
            self.node_of[iid] = node_name
        self.sim.add_instance(iid, instance_type, next(iter(self.sim.vswitches)))
        return iid

    def addresses(self) -> dict[str, str]:
        """Ground truth: every secondary address (IPv6 ones too) the cloud holds -> node
        name."""
        with self._lock:
            node_of = dict(self.node_of)
        return {ip: node_of.get(iid, iid) for ip, iid in self.sim.addresses().items()}

    def kill_at(self, api: str, death: Callable[[], BaseException], *,
                when: str = "after", nth: int = 1,
                only: Callable[[Any], bool] | None = None) -> None:
        """The controller process dies at its ``nth`` next ``api`` request (``after``: the
        cloud did it and the answer was never read; ``before``: never sent): ``death()``
        is raised from the SDK call, past the provider's own error handling, and the
        provider forgets what a process keeps only in memory (the ENIs whose rollback
        failed, its views). ``only``: counts only the requests it says yes to (e.g. a
        trunk ENI's create). One shot."""
        plugin = self.plugin
        real = EcsProvider._call
        left = [nth]

        def call(api_now: str, request: Any, subject: str | None = None) -> Any:
            if api_now != api or (only is not None and not only(request)):
                return real(plugin, api_now, request, subject)
            left[0] -= 1
            if left[0] > 0:
                return real(plugin, api_now, request, subject)
            del plugin._call  # one shot: the class's method again
            if when == "after":
                try:
                    real(plugin, api_now, request, subject)
                except Exception:  # it dies either way
                    pass
            with plugin._lock:
                plugin._orphans.clear()
                plugin._seen.clear()
            raise death()

        plugin._call = call  # type: ignore[method-assign,assignment]

    def disarm(self) -> None:
        """No kill planned (:meth:`kill_at`) any more, and no scripted cloud failure
        (``sim.fail_next``) left: one armed to lead to a kill that never came would
        otherwise refuse calls long after, when no fault is meant to be on."""
        self.plugin.__dict__.pop("_call", None)
        self.sim.clear_scripted()

    def leftovers(self) -> dict[str, list[str]]:
        """Ground truth: every detached secondary ENI podnet made (its tag, or an older
        ENI's description) -> its addresses (IPv6 ones too). No inventory lists them."""
        with self.sim.lock:
            self.sim._settle_all()
            return {e.id: [*e.secondary, *e.ipv6] for e in self.sim.enis.values()
                    if e.kind == "Secondary" and e.status == "Available"
                    and ("podnet.io/instance" in e.tags or e.description.startswith("podnet:"))}

    def trunks(self) -> dict[str, list[tuple[str, str]]]:
        """Ground truth: every trunk ENI -> (id, status) by the instance it is attached to
        or was made for (its tag)."""
        out: dict[str, list[tuple[str, str]]] = {}
        with self.sim.lock:
            self.sim._settle_all()
            for e in sorted(self.sim.enis.values(), key=lambda e: e.id):
                if e.kind == "Trunk":
                    owner = e.instance_id or e.tags.get("podnet.io/instance") or ""
                    out.setdefault(owner, []).append((e.id, e.status))
        return out

    def attach_by_hand(self, instance: str, count: int, *, mark: str | None = "tag"
                       ) -> tuple[str, list[str]]:
        """An ENI with ``count`` secondary addresses made and attached to ``instance``
        outside the controller (as a console user would; the simulator's limits and faults
        apply): marked as podnet marks its ENIs (``mark`` ``"tag"``, or ``"description"``
        as before 0.5.0) or not at all (None). Its id and addresses."""
        marks = {"tag": {"Tag.1.Key": "podnet.io/instance", "Tag.1.Value": instance},
                 "description": {"Description": f"podnet:{instance}"}, None: {}}[mark]
        made = self.sim.dispatch("CreateNetworkInterface", {
            "RegionId": REGION, "VSwitchId": next(iter(self.sim.vswitches)),
            "SecurityGroupId": SECURITY_GROUPS[0],
            "SecondaryPrivateIpAddressCount": str(count), **marks})
        eni_id = str(made["NetworkInterfaceId"])
        self.sim.dispatch("AttachNetworkInterface", {"RegionId": REGION,
                                                     "NetworkInterfaceId": eni_id,
                                                     "InstanceId": instance})
        return eni_id, [str(ip["PrivateIpAddress"])
                        for ip in made["PrivateIpSets"]["PrivateIpSet"] if not ip["Primary"]]

    def close(self) -> None:
        self.plugin.close()
        self.sim.stop()


def build(settings: DemoSettings, *, instance_type: str = DEMO_INSTANCE_TYPE) -> DemoCloud:
    """For ``podnet demo --provider ecs``: the simulator, its instances of
    ``instance_type``, and the provider talking to it. ``settings``' latency, cloud rate
    (calls/s per API, enforced by the simulator as the cloud would), fault rate and seed
    apply.
    """
    # no vSwitch in its config: the Subnet object (:data:`SUBNETS`) names them
    world = EcsWorld(latency=settings.cloud_latency_ms / 1000,
                     rate=settings.cloud_rate or None, fault_rate=settings.fault_rate,
                     seed=settings.seed, instance_type=instance_type, vswitches=[])

    def calls() -> Counter[str]:
        return Counter(world.sim.calls)

    def setup_node(node: dict[str, Any]) -> dict[str, Any]:
        name = str(node["metadata"]["name"])
        iid = world.add_node(name, instance_type)
        node.setdefault("spec", {})["providerID"] = f"{REGION}.{iid}"
        labels = node["metadata"].setdefault("labels", {})
        labels["node.kubernetes.io/instance-type"] = instance_type
        return node

    return DemoCloud(world.plugin, world.addresses, calls, setup_node,
                     attached=world.sim.attached)


def min_calls(pods_per_node: Sequence[int]) -> dict[str, tuple[int, bool]]:
    """The fewest calls a perfect controller could make for this burst, per API, and
    whether each is a write: one inventory read per node; on each node with pods as many
    secondary ENIs as its pods fill (Terway puts no pod on the primary ENI), each created
    with all the addresses it will hold and attached (2 calls), its attach confirmed by one
    DescribeNetworkInterfaces. No AssignPrivateIpAddresses is needed then."""
    per_eni = INSTANCE_TYPES[DEMO_INSTANCE_TYPE][1] - 1
    enis = sum(-(-p // per_eni) for p in pods_per_node if p)
    return {
        "CreateNetworkInterface": (enis, True),
        "AttachNetworkInterface": (enis, True),
        "DescribeNetworkInterfaces": (len(pods_per_node) + enis, False),
    }


#: the demo's Subnet object: both vSwitches of the simulator's zone (one block holds them)
SUBNETS: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "ecs-demo"},
     "spec": {"provider": "ecs", "cidrBlock": "10.0.0.0/15", "default": True,
              "parameters": {"vSwitchIds": {"cn-hangzhou-k": list(VSWITCHES)}}}},
)

DEMO = DemoProvider(build, write_apis=WRITE_APIS, min_calls=min_calls, subnets=SUBNETS)
