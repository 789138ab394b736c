"""``podnet node``: the node agent.

One per node (a DaemonSet on the host network). It watches its own node's PodNetworks
(the server-side label selector ``podnet.io/node=<node>``), serves the CNI plugin's
requests on a unix socket (HTTP/1.1, JSON; the protocol is in docs/node.md), and plumbs
each pod interface through its provider's dataplane hooks, called through the same
provider gateway the controller uses. The plugin is a static program that forwards each
invocation (``POST /v1/cni/exec``); the CNI specification's rules (environment,
configuration, versions, results, chaining) are applied here (``podnet.node.cniexec``):

- ``ADD`` waits, bounded, until every PodNetwork of the pod (the default network, then
  each attachment of ``podnet.io/networks``) is Routed, then plugs each one (the default
  network as the interface the runtime names, attachments as ``net1``, ``net2``, ...);
- ``DEL`` unplugs every interface plugged for the container; it never releases an address
  (the controller does, once the pod is gone);
- ``CHECK`` compares the interfaces with the records;
- ``GC`` unplugs what was plugged for containers the runtime no longer lists;
- on start, what was plugged for records that no longer exist is unplugged;
- before it plugs a record it writes its host onto it (``podnet.io/plugged-on``), and it
  reports to the controller, in its node's Lease (its own: restored when deleted or
  edited, never taken from another host's live agent), the Releasing records it holds no
  interface for (``report``): the controller hands their addresses to other pods only
  then (the release handshake, ``podnet.core.unplug``);
- for ``podnet-ipam`` (another CNI plugin plumbs the interface), ``/v1/ipam/*`` answer one
  PodNetwork's addresses and routes, plug nothing and release nothing.
"""

from podnet.node.agent import NodeAgent
from podnet.node.protocol import (
    CHECK_FAILED,
    DEFAULT_ADD_TIMEOUT,
    DEFAULT_NAMESPACE,
    DEFAULT_SOCKET,
    INVALID,
    NOT_READY,
    TRY_AGAIN,
    Attachments,
    CniError,
    CniRequest,
    cni_result,
    interface_names,
    ipam_result,
)
from podnet.node.server import UnixHTTPServer, listen, run

__all__ = [
    "CHECK_FAILED",
    "DEFAULT_ADD_TIMEOUT",
    "DEFAULT_NAMESPACE",
    "DEFAULT_SOCKET",
    "INVALID",
    "NOT_READY",
    "TRY_AGAIN",
    "Attachments",
    "CniError",
    "CniRequest",
    "NodeAgent",
    "UnixHTTPServer",
    "cni_result",
    "interface_names",
    "ipam_result",
    "listen",
    "run",
]
