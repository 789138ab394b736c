"""The provider conformance suite, applied to the OVN provider against a real NB server."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK
from podnet.core.convert import from_wire, to_wire
from podnet.core.errors import ErrorKind
from podnet.core.models import PodNetwork
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.conformance import ProviderConformance
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


class TestOvnConformance(ProviderConformance):
    provider_name = "ovn"

    @pytest.fixture
    def provider_plugin(self, nb_server: NbServer) -> Iterator[Any]:
        from podnet.plugins.ovn.provider import OvnProvider

        plugin = OvnProvider(nb_server.remote, seed=0)
        yield plugin
        _wipe(plugin)
        plugin.close()

    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:
        addresses: dict[str, str] = plugin.nb_addresses()
        return addresses

    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        from ovsdbapp.exceptions import TimeoutException

        return [
            (TimeoutException(commands=[], timeout=1, cause="no answer"), ErrorKind.TRANSIENT),
            (RuntimeError("OVSDB Error: connection dropped"), ErrorKind.TRANSIENT),
            (ConnectionResetError("reset"), ErrorKind.TRANSIENT),
        ]


    def test_records_round_trip(self, world: World) -> None:
        """The kit's version counts one NodeNetwork, which only pool providers get; an
        own-IPAM provider's node has none. Same checks otherwise."""
        self._bring_up(world, pods=3)
        world.delete_pod("p2")
        world.settle()
        stored = world.cluster.list(POD_NETWORK).items
        assert len(stored) == 2
        assert world.cluster.list(NODE_NETWORK).items == []
        for obj in stored:
            model = from_wire(PodNetwork, obj)
            assert to_wire(model) == obj
            assert from_wire(PodNetwork, to_wire(model)) == model


def _wipe(plugin: Any) -> None:
    """Remove every podnet row: the next test starts from an empty NB on the same server."""
    from podnet.plugins.ovn.rows import OWNER, OWNER_VALUE

    client = plugin.client
    api = client.api
    with api.transaction(check_error=True) as txn:
        for table in ("Logical_Switch", "Port_Group", "Logical_Router"):
            for row in client.rows(table):
                if row.external_ids.get(OWNER) == OWNER_VALUE:
                    txn.add(api.db_destroy(table, row.uuid))
