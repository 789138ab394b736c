"""The truth table of ``tests/test_netpol_truth.py`` on a dual-stack ENI dataplane: the
ECS provider's pods (each a /32 and a /128 of its node's ENIs, routed, not bridged) on two
nodes of the simulated VPC (``tests/test_eni_dataplane.py``'s bed), their node agents
enforcing with nftables; every matrix probed over IPv4 and over IPv6. The reference
dataplane's bed has one family; this one proves the node's enforcement for IPv6.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_eni_dataplane import CREDENTIALS
from test_eni_dataplane import Bed as EniBed
from test_netpol_truth import (  # the same tests, collected here on this module's bed
    pytestmark,
    running,
    test_a_deleted_policy_opens_what_it_closed,
    test_a_label_flipped_on_a_running_pod_moves_it_in_and_out,
    test_a_relabelled_namespace_moves_its_pods_in_and_out,
    test_the_bed_reads_the_policies_as_kubectl_does,
    test_the_matrix_is_the_oracles,
)

from podnet.testing.netpol.beds import PolicyBed
from podnet.testing.nodebed import AgentClient

pytest_plugins = ["podnet.testing"]

__all__ = [
    "pytestmark", "test_a_deleted_policy_opens_what_it_closed",
    "test_a_label_flipped_on_a_running_pod_moves_it_in_and_out",
    "test_a_relabelled_namespace_moves_its_pods_in_and_out",
    "test_the_bed_reads_the_policies_as_kubectl_does", "test_the_matrix_is_the_oracles",
]


class EcsPolicyBed(PolicyBed):
    """Two dual-stack ECS nodes in the simulated VPC, an agent each."""

    name = "ecs"
    NODES = ("np-a", "np-b")

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.eni: EniBed | None = None
        try:
            started = time.monotonic()
            self.eni = EniBed(tmp, dual=True)
            self.eni.nodes(*self.NODES)
            self.timings["start"] = time.monotonic() - started
            self._populate()
        except BaseException:
            self.close()
            raise

    def kubectl(self, *args: str, input: str | None = None) -> str:
        assert self.eni is not None and self.eni.stack is not None
        return self.eni.stack.kubectl(*args, input=input)

    def policies(self) -> list[dict[str, Any]]:
        assert self.eni is not None and self.eni.stack is not None
        return self._stack_policies(self.eni.stack)

    def nodes(self) -> Sequence[str]:
        return self.NODES

    def node_addresses(self) -> Mapping[str, tuple[str, ...]]:
        assert self.eni is not None
        return {name: (n.address,) for name, n in self.eni.underlay.nodes.items()}

    def plug(self, namespace: str, name: str, node: str) -> tuple[str, tuple[str, ...]]:
        assert self.eni is not None and self.eni.stack is not None
        _, path = self.eni.host.netns()
        container = self.eni.host.container()
        client = AgentClient(self.eni.stack.socket_of(node))
        body: dict[str, Any] = {}
        for _ in range(50):
            status, body = client.add(container, path, name, namespace=namespace)
            if status == 200:
                return path, tuple(ip["address"].split("/")[0] for ip in body["ips"])
            # an ENI's device may appear a moment after the record is Routed
            if "has no device" not in str(body.get("msg")):
                break
            time.sleep(0.2)
        raise AssertionError(f"ADD of {namespace}/{name} on {node}: {body}")

    def close(self) -> None:
        super().close()
        if self.eni is not None:
            self.eni.close()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyBed]:
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)  # the bed's processes inherit them
    try:
        made = EcsPolicyBed(tmp_path_factory.mktemp("netpol-ecs"))
        assert made.families == (4, 6), f"the ECS bed's pods are not dual-stack: {made.families}"
        yield from running(made)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
