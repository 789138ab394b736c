"""What ``podnet status`` and ``podnet audit`` share: the records read once through the
official-client adapter (never written), the connection and its arguments, which record
owns which address, and the output's helpers.

Like the two commands' modules, this one imports only the standard library, attrs and the
clock at import time (the CLI builds its parser on every command); the client, the
converter and the plugins are imported when a command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.cluster.port import Cluster
    from podnet.core.models import AgentReport, NodeNetwork, PodNetwork
    from podnet.linux.eni import EniSummary

__all__ = [
    "EXIT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "OWNING_PHASES",
    "Records",
    "Unreadable",
    "address_owners",
    "cell",
    "cluster_arguments",
    "connect",
    "dig",
    "error_line",
    "make_console",
    "one_line_of",
    "owned_addresses",
    "plain_table",
    "read_records",
    "show",
]

#: Exit statuses: clean, findings (audit only), usage or configuration errors.
EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    parser.add_argument("--context", default=None,
                        help="the kubeconfig context to use (default: its current context)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table",
                        help="a table for people, or JSON for scripts (default %(default)s)")



@attrs.frozen
class Unreadable:
    """A record that does not parse: shown with its error, never used for decisions."""

    kind: str  # "NodeNetwork" | "PodNetwork"
    name: str  # node name, or namespace/name
    node: str | None
    provider: str | None
    error: str
    #: addresses its raw status claims: an audit must not call them leaked
    addresses: tuple[str, ...] = ()


@attrs.frozen
class Records:
    node_networks: tuple[NodeNetwork, ...]
    pod_networks: tuple[PodNetwork, ...]
    unreadable: tuple[Unreadable, ...]
    #: the node agents' reports (their Leases), by node
    agents: tuple[AgentReport, ...] = ()
    #: node -> what its agent says of its ENI dataplane (a string: why it does not parse)
    dataplanes: tuple[tuple[str, EniSummary | str], ...] = ()
    #: the Subnet and IPPool objects as the API serves them (their status says how full)
    subnets: tuple[Mapping[str, Any], ...] = ()
    ip_pools: tuple[Mapping[str, Any], ...] = ()

    def dataplane_of(self, node: str | None) -> EniSummary | str | None:
        return dict(self.dataplanes).get(node or "")


def dig(obj: Mapping[str, Any], *path: str) -> str | None:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value if isinstance(value, str) else None


def read_records(cluster: Cluster, agent_namespace: str | None = None) -> Records:
    """Every NodeNetwork and PodNetwork, parsed; those that do not parse set apart; with
    ``agent_namespace``, the node agents' reports there too."""
    from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK
    from podnet.core.convert import RecordError, from_wire
    from podnet.core.models import NodeNetwork, PodNetwork
    from podnet.core.objects import record_finished

    node_networks: list[NodeNetwork] = []
    pod_networks: list[PodNetwork] = []
    unreadable: list[Unreadable] = []
    for obj in cluster.list(NODE_NETWORK).items:
        try:
            node_networks.append(from_wire(NodeNetwork, obj))
        except RecordError as exc:
            name = dig(obj, "metadata", "name") or "?"
            unreadable.append(Unreadable("NodeNetwork", name, name,
                                         dig(obj, "spec", "provider"), str(exc)))
    for obj in cluster.list(POD_NETWORK).items:
        if record_finished(obj):
            continue  # released, left to the garbage collector: as good as deleted
        try:
            pod_networks.append(from_wire(PodNetwork, obj))
        except RecordError as exc:
            key = f"{dig(obj, 'metadata', 'namespace')}/{dig(obj, 'metadata', 'name') or '?'}"
            claimed = tuple(a for a in (dig(obj, "status", "ip"), dig(obj, "status", "ipv6"))
                            if a)
            unreadable.append(Unreadable("PodNetwork", key, dig(obj, "spec", "nodeName"),
                                         dig(obj, "spec", "provider"), str(exc), claimed))
    agents: list[AgentReport] = []
    dataplanes: list[tuple[str, EniSummary | str]] = []
    if agent_namespace is not None:
        from podnet.core.cluster.port import LEASE
        from podnet.core.objects import LABEL_AGENT_NODE, agent_report
        from podnet.linux.eni import ANNOTATION_ENI, EniSummary

        for obj in cluster.list(LEASE, agent_namespace, label_selector=LABEL_AGENT_NODE).items:
            report = agent_report(obj)
            if report is None:
                continue
            agents.append(report)
            text = dig(obj, "metadata", "annotations", ANNOTATION_ENI)
            if text is not None:
                try:
                    dataplanes.append((report.node, EniSummary.from_json(text)))
                except ValueError as exc:
                    dataplanes.append((report.node, f"{ANNOTATION_ENI}: {exc}"))
    return Records(
        tuple(sorted(node_networks, key=lambda nn: nn.metadata.name)),
        tuple(sorted(pod_networks, key=lambda pn: pn.key)),
        tuple(sorted(unreadable, key=lambda u: (u.kind, u.name))),
        tuple(sorted(agents, key=lambda a: a.node)),
        tuple(sorted(dataplanes, key=lambda d: d[0])),
        _network_objects(cluster, "Subnet", "subnets"),
        _network_objects(cluster, "IPPool", "ippools"),
    )


def _network_objects(cluster: Cluster, kind: str, plural: str) -> tuple[Mapping[str, Any], ...]:
    """Every object of a network kind, by name; none when the cluster does not serve the
    kind (its CRD not installed yet)."""
    from podnet.core.cluster.port import Kind, NotFound

    try:
        items = cluster.list(Kind("podnet.io", "v1alpha1", kind, plural, False)).items
    except NotFound:
        return ()
    return tuple(sorted(items, key=lambda o: dig(o, "metadata", "name") or ""))


def connect(args: argparse.Namespace) -> KubeCluster:
    """The cluster as ``podnet run`` finds it, asked once that it answers.

    :raises ConfigError: when there is no way in (no kubeconfig, a host that does not
        resolve, credentials refused, no Kubernetes API there).
    :raises ApiError: when the server does not answer, its message one short line naming
        the server and the cause ("connection refused"), not the client's retry dump."""
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.cluster.port import ApiError

    cluster = KubeCluster.connect(args.kubeconfig, args.context)
    try:
        cluster.probe()
    except ApiError as exc:
        cluster.close()
        raise ApiError(f"API server {cluster.server} unreachable: {exc}",
                       code=exc.code) from exc
    except BaseException:
        cluster.close()
        raise
    return cluster


def error_line(exc: BaseException) -> str:
    """One line for a failure of ``status`` or ``audit``: a transport failure met after
    the first answer (the server went away meanwhile) by its innermost cause."""
    from podnet.core.cluster.kubeerrors import TRANSPORT_ERRORS, root_cause

    if isinstance(exc.__cause__, TRANSPORT_ERRORS) and "API server unreachable" in str(exc):
        what = str(exc).partition(": API server unreachable")[0]
        return one_line_of(f"{what}: API server unreachable: {root_cause(exc.__cause__)}")
    return one_line_of(exc)


#: Phases in which a record owns its address, as the engine counts them when it rebuilds a pool.
OWNING_PHASES = frozenset({"Allocated", "Routed", "Releasing"})


def owned_addresses(pn: PodNetwork) -> Iterator[str]:
    """The addresses ``pn`` owns: none before it is allocated."""
    if str(pn.status.phase) in OWNING_PHASES:
        for address in (pn.status.ip, pn.status.ipv6):
            if address:
                yield address


def address_owners(records: Records) -> dict[tuple[str, str], PodNetwork | None]:
    """(provider, address) -> the record owning it (None: a record that does not parse
    claims it). Ownership comes from the records, never from a NodeNetwork's ``owner``
    fields: the engine rewrites those only when the pool's shape changes, so they lag."""
    owned: dict[tuple[str, str], PodNetwork | None] = {}
    for pn in records.pod_networks:
        for address in owned_addresses(pn):
            owned[(pn.spec.provider, address)] = pn
    for bad in records.unreadable:
        for address in bad.addresses:
            owned.setdefault((bad.provider or "", address), None)
    return owned



def one_line_of(message: object) -> str:
    """One line, credentials hidden: provider and client errors may quote a request."""
    from podnet.core.errors import one_line

    return one_line(message)


def cell(value: Any) -> str:
    return "" if value is None else str(value)


def make_console() -> Any:
    from rich.console import Console

    # every string printed comes from the records or the cloud: none is rich markup
    # ("metadata.annotations[podnet.io/networks]" is text, not a style tag) or an emoji code
    console = Console(markup=False, emoji=False, highlight=False)
    if console.is_terminal:
        return console
    # piped output is read by people and by grep: do not squeeze it to 80 columns
    return Console(width=200, markup=False, emoji=False, highlight=False)


def show(*items: Any) -> None:
    """Print rich tables (and lines of text): boxes on a terminal; plain columns
    otherwise, as kubectl prints them, so a pipe to grep, awk or a file gets one row per
    line (see :func:`plain_table`)."""
    import sys

    console = make_console()
    if console.is_terminal:
        for item in items:
            console.print(item)
        return
    for item in items:
        sys.stdout.write(item + "\n" if isinstance(item, str) else plain_table(item))


def plain_table(table: Any) -> str:
    """A rich Table as plain text: its title as a ``# title`` line, a header in capitals,
    then one line per row, columns aligned and split by at least two spaces. An empty cell
    is ``-`` and a cell of several lines has them joined by ``; ``: no field is empty
    and no row spans two lines."""
    columns = list(table.columns)
    header = [str(c.header).upper() for c in columns]
    cells = [["; ".join(part for part in str(v).splitlines() if part) or "-"
              for v in c.cells] for c in columns]
    rows = [[col[i] for col in cells] for i in range(len(table.rows))]
    widths = [max([len(h), *(len(r[j]) for r in rows)]) for j, h in enumerate(header)]
    right = [c.justify == "right" for c in columns]

    def line(values: list[str]) -> str:
        out = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right,
                                                                     strict=True)]
        return "  ".join(out).rstrip() + "\n"

    title = f"# {table.title}\n" if table.title else ""
    return title + line(header) + "".join(line(r) for r in rows) + "\n"
