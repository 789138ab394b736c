"""The OVN provider's dataplane on a node: a veth pair per pod interface, its host end a
port of the integration bridge (``br-int``) that ``ovn-controller`` binds to the pod's
logical switch port.

The host end (``pno<10 hex>``, from the container id and the interface name, so a second
plug finds the first one's) joins the bridge with the Interface's ``external_ids`` that
``ovn-controller`` reads: ``iface-id`` (the logical switch port), ``attached-mac`` and
``iface-status=active``, plus the pod's ``pod_name`` and ``pod_namespace`` (as Kube-OVN
writes them) and podnet's marks (``podnet-owner`` = the record's key, the container, the
interface, the network), which is how the agent lists what it plugged after a restart.
The pod end is made in the pod's namespace, renamed to the interface name, and given the
port's MAC, the address with the subnet's prefix, the MTU and the routes; its transmit
checksum offload is turned off: with it on, the kernel leaves TCP checksums to a device
that the userspace datapath is not, and TCP silently fails while ping works.

``podnet_plug`` returns once ``ovn-controller`` set ``external_ids:ovn-installed=true`` on
the Interface: it does so after it claimed the port's SB Port_Binding for this chassis
and installed its flows, so packets pass from then on. It is read from the local OVS
database, so the node needs no connection to NB or SB.

The local database is reached through ovsdbapp's Open_vSwitch schema, the same backend as
the provider's NB client (``nb.py``): one long-lived connection whose transactions put
the port, its Interface and their columns in one atomic step, no ``ovs-vsctl`` binary on
the node, and polling for ``ovn-installed`` costs a read, not a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.types import (
    CheckResult,
    Plug,
    PlugContext,
    PlugResult,
    UnplugContext,
    owner_digest,
)
from podnet.linux.netns import iproute
from podnet.linux.veth import (
    IFALIASZ,
    closing,
    configure_pod_end,
    delete_link,
    failure,
    link_aliases,
    link_index,
    make_pair,
    pod_end_differs,
    pod_namespace,
    set_tx_checksum,
    tx_checksum_on,
)
from podnet.linux.veth import veth_names as _veth_names

HOST_PREFIX = "pno"
PEER_PREFIX = "pnq"
ALIAS_MARK = "podnet-ovn:"
#: the Interface's external_ids podnet writes (``iface-id`` and ``attached-mac`` are what
#: ovn-controller binds by; ``ovn-installed`` is what it answers)
OWNER_ID = "podnet-owner"
CONTAINER_ID = "podnet-container"
IFNAME_ID = "podnet-ifname"
NETWORK_ID = "podnet-network"
INSTALLED = "ovn-installed"

_counter = 0
_counter_lock = threading.Lock()


def veth_names(container_id: str, if_name: str) -> tuple[str, str]:
    """The host end's name (also the OVS port's) and its peer's, stable for one container
    and interface."""
    return _veth_names(HOST_PREFIX, PEER_PREFIX, container_id, if_name)


def _alias(marks: dict[str, str]) -> str:
    """The host end's mark; the kernel keeps at most 255 bytes of an alias, so a record
    key too long for it is kept as its digest (the agent takes it back to the key; the
    OVS port's external_ids, listed first, keep the key itself)."""
    alias = ALIAS_MARK + json.dumps(marks, separators=(",", ":"), sort_keys=True)
    if len(alias.encode()) > IFALIASZ:
        short = {**marks, OWNER_ID: owner_digest(marks[OWNER_ID])}
        alias = ALIAS_MARK + json.dumps(short, separators=(",", ":"), sort_keys=True)
    if len(alias.encode()) > IFALIASZ:
        # no room even for the digest (the longest names): the OVS port keeps the key; a
        # host end listed without an owner is a leftover the agent removes
        short = {k: v for k, v in marks.items() if k != OWNER_ID}
        alias = ALIAS_MARK + json.dumps(short, separators=(",", ":"), sort_keys=True)
    return alias


# --- the local Open vSwitch database --------------------------------------------------------


def _connect(remote: str, timeout: float) -> Any:
    """An Open_vSwitch API of its own: ovsdbapp keeps the connection on the class, so every
    instance gets a subclass (as the NB client does)."""
    from ovsdbapp.backend.ovs_idl import connection
    from ovsdbapp.schema.open_vswitch.impl_idl import OvsdbIdl

    global _counter
    with _counter_lock:
        _counter += 1
        name = f"PodnetOvsApi{_counter}"
    idl = connection.OvsdbIdl.from_server(remote, "Open_vSwitch")
    conn = connection.Connection(idl, timeout=timeout)
    cls = type(name, (OvsdbIdl,), {"_ovsdb_connection": None})
    return cls(conn)


class OvsDataplane:
    """Plug, check, unplug and list one host's pod interfaces on its integration bridge.

    ``ovs_db``: the local Open vSwitch database (``unix:PATH`` or ``tcp:HOST:PORT``);
    ``bind_timeout``: how long a plug waits for ovn-controller to install the port."""

    def __init__(self, ovs_db: str, bridge: str = "br-int", *, bind_timeout: float = 20.0,
                 timeout: float = 10.0) -> None:
        self.ovs_db = ovs_db
        self.bridge = bridge
        self.bind_timeout = bind_timeout
        self.timeout = timeout
        self._api: Any = None
        self._lock = threading.Lock()
        #: seconds from writing each port to ovn-controller's ovn-installed (the last
        #: 1,000), for tests and benchmarks
        self.bind_seconds: list[float] = []

    @property
    def api(self) -> Any:
        with self._lock:
            if self._api is None:
                try:
                    self._api = _connect(self.ovs_db, self.timeout)
                except Exception as exc:
                    raise failure(f"local OVS database {self.ovs_db}: {exc}") from exc
            return self._api

    def close(self) -> None:
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            with contextlib.suppress(Exception):
                api.ovsdb_connection.stop()

    def _interface(self, name: str) -> dict[str, Any] | None:
        rows = self.api.db_list("Interface", [name], columns=["name", "external_ids"],
                                if_exists=True).execute(check_error=True)
        return rows[0] if rows else None

    # --- plug ----------------------------------------------------------------------------

    def plug(self, context: PlugContext, port: str) -> PlugResult:
        """Plug the record's interface as logical switch port ``port``."""
        pn = context.pod_network
        st = pn.status
        if st.ip is None or st.mac is None:
            raise ProviderError(ErrorKind.FATAL, f"{pn.key} has no address or MAC",
                                field="status.ip")
        host, peer = veth_names(context.container_id, context.if_name)
        marks = {CONTAINER_ID: context.container_id, IFNAME_ID: context.if_name,
                 NETWORK_ID: pn.spec.network, OWNER_ID: pn.key}
        with closing(pod_namespace(context.netns)) as ns, closing(iproute()) as ipr:
            assert context.netns is not None  # pod_namespace checked it
            host_index = self._pair(ipr, ns, context, host, peer, marks)
            settings: dict[str, Any] = {"state": "up"}
            if st.mtu:
                settings["mtu"] = st.mtu
            ipr.link("set", index=host_index, **settings)
            inside = link_index(ns, context.if_name)
            if inside is None:
                raise failure(f"{context.if_name} vanished from {context.netns}")
            prefix = st.prefix_length if st.prefix_length is not None else 32
            configure_pod_end(ns, inside, st, prefix)
        if tx_checksum_on(context.netns, context.if_name):
            set_tx_checksum(context.netns, context.if_name, False)
        ids = {"iface-id": port, "attached-mac": st.mac.lower(), "iface-status": "active",
               "pod_name": pn.spec.pod_name, "pod_namespace": pn.metadata.namespace or "",
               **marks}
        api = self.api
        started = time.monotonic()
        with api.transaction(check_error=True) as txn:
            # a port already there (a retried ADD) keeps its row: its ids are corrected
            txn.add(api.add_port(self.bridge, host, may_exist=True))
            txn.add(api.db_set("Interface", host, ("external_ids", ids)))
        self._wait_installed(host, port, started)
        return PlugResult(name=context.if_name, mac=st.mac.lower(), sandbox=context.netns,
                          host_interface=host)

    def _pair(self, ipr: Any, ns: Any, context: PlugContext, host: str, peer: str,
              marks: dict[str, str]) -> int:
        """The veth pair, found or made: the host end here, the pod end in the pod's
        namespace under the interface's name. :return: the host end's index."""
        inside = link_index(ns, context.if_name)
        host_index = link_index(ipr, host)
        if host_index is not None and inside is None:
            # half made (the agent died between the steps): made again
            ipr.link("del", index=host_index)
            host_index = None
        if host_index is not None:
            return host_index
        if inside is not None:
            raise ProviderError(ErrorKind.FATAL, f"{context.if_name} already exists in "
                                f"{context.netns} and is not podnet's", field="ifName")
        assert context.netns is not None  # plug checked it
        st = context.pod_network.status
        assert st.mac is not None  # plug checked it
        delete_link(ipr, peer)  # a peer an older version of this step left on the host
        host_index = make_pair(ipr, host, context.netns, context.if_name, st.mac, st.mtu)
        # marked at once, before it is an OVS port: a crash right after leaves a pair
        # the agent still lists (and removes)
        ipr.link("set", index=host_index, ifalias=_alias(marks))
        return host_index

    def _wait_installed(self, host: str, port: str, start: float) -> None:
        """Wait for ``ovn-installed``; ``start``: when the port was written (the bind
        latency recorded in :attr:`bind_seconds` counts from there)."""
        deadline = time.monotonic() + self.bind_timeout
        while True:
            row = self._interface(host)
            if row is not None and row["external_ids"].get(INSTALLED) == "true":
                self.bind_seconds = [*self.bind_seconds[-999:], time.monotonic() - start]
                return
            if time.monotonic() > deadline:
                raise failure(f"logical switch port {port} (OVS port {host} on {self.bridge}) "
                            f"was not bound by ovn-controller within {self.bind_timeout:g} s")
            time.sleep(0.01)

    # --- check ---------------------------------------------------------------------------

    def check(self, context: PlugContext, port: str) -> CheckResult:
        if not context.netns or not os.path.exists(context.netns):
            return CheckResult(ok=False, reason=f"network namespace {context.netns} is gone")
        host, _ = veth_names(context.container_id, context.if_name)
        with closing(iproute()) as ipr:
            if link_index(ipr, host) is None:
                return CheckResult(ok=False, reason=f"host end {host} is missing")
        row = self._interface(host)
        if row is None:
            return CheckResult(ok=False, reason=f"OVS port {host} is missing")
        ids = row["external_ids"]
        if ids.get("iface-id") != port:
            return CheckResult(ok=False, reason=f"OVS port {host} is bound to "
                                                f"{ids.get('iface-id')!r}, not {port}")
        if ids.get(INSTALLED) != "true":
            return CheckResult(ok=False, reason=f"ovn-controller has not installed {port}")
        with closing(pod_namespace(context.netns)) as ns:
            reason = pod_end_differs(ns, context.if_name, context.pod_network.status)
        if reason:
            return CheckResult(ok=False, reason=reason)
        if tx_checksum_on(context.netns, context.if_name):
            return CheckResult(ok=False, reason=f"{context.if_name} offloads its transmit "
                                                "checksums")
        return CheckResult(ok=True)

    # --- unplug and list -----------------------------------------------------------------

    def unplug(self, context: UnplugContext) -> None:
        host, _ = veth_names(context.container_id, context.if_name)
        api = self.api
        api.del_port(host, if_exists=True).execute(check_error=True)
        with closing(iproute()) as ipr:
            delete_link(ipr, host)  # its peer, in the pod, goes with it

    def plugs(self) -> list[Plug]:
        """The OVS ports podnet marked, and the marked host ends not yet on the bridge (a
        plug interrupted before it added the port)."""
        found: dict[str, Plug] = {}
        # a host without OVS (an agent running several providers) has plugged nothing
        # into it: its start-up pass must not fail for that
        local = self.ovs_db.startswith("unix:") and not os.path.exists(self.ovs_db[5:])
        rows = [] if local else self.api.db_list(
            "Interface", columns=["name", "external_ids"]).execute(check_error=True)
        for row in rows:
            ids = row["external_ids"]
            if OWNER_ID in ids and CONTAINER_ID in ids and IFNAME_ID in ids:
                found[row["name"]] = Plug(container_id=ids[CONTAINER_ID],
                                          if_name=ids[IFNAME_ID],
                                          network=ids.get(NETWORK_ID, "default"),
                                          owner=ids[OWNER_ID], host_interface=row["name"])
        for name, alias in link_aliases().items():
            if name in found or not name.startswith(HOST_PREFIX):
                continue
            if not alias.startswith(ALIAS_MARK):
                continue
            try:
                marks = json.loads(alias[len(ALIAS_MARK):])
                found[name] = Plug(container_id=str(marks[CONTAINER_ID]),
                                   if_name=str(marks[IFNAME_ID]),
                                   network=str(marks[NETWORK_ID]),
                                   owner=marks.get(OWNER_ID), host_interface=name)
            except (ValueError, KeyError, TypeError):
                continue
        return list(found.values())
