"""The names podnet's spans use: attribute keys, event names, retry reasons, the scope.

Keys follow OpenTelemetry's semantic conventions where one exists (``k8s.*``,
``error.type``, ``rpc.*``, ``container.id``), ``podnet.*`` otherwise.
"""

from __future__ import annotations

from typing import Final

ATTR_MACHINE: Final = "podnet.machine"
ATTR_TRIGGER: Final = "podnet.trigger"
ATTR_FROM: Final = "podnet.state.from"
ATTR_TO: Final = "podnet.state.to"
ATTR_PROVIDER: Final = "podnet.provider"
ATTR_OBJECT: Final = "podnet.object"
ATTR_POD: Final = "k8s.pod.name"
ATTR_NAMESPACE: Final = "k8s.namespace.name"
ATTR_NODE: Final = "k8s.node.name"
ATTR_IP: Final = "podnet.ip"
ATTR_INTERFACE: Final = "podnet.interface"
#: OpenTelemetry's semantic convention for a container's id (the CNI sandbox)
ATTR_CONTAINER: Final = "container.id"
ATTR_ERROR_TYPE: Final = "error.type"
#: what a transition attempt that found nothing to take waits for (``address``): the
#: attempt is a wait, not a failure, and its span is not ERROR
ATTR_WAITING: Final = "podnet.waiting"
#: the span event of such an attempt, and its attribute saying why
EVENT_WAITING: Final = "waiting"
ATTR_WAITING_REASON: Final = "podnet.waiting.reason"
#: an attempt that ends to be retried at once, not failed: ``conflict`` (a write with a
#: stale ``resourceVersion``; the writer reads again). Its span event says why
ATTR_RETRY: Final = "podnet.retry"
RETRY_CONFLICT: Final = "conflict"
#: a provider call the cloud throttled: its caller waits and calls again (a read read
#: again soon, a grow after its backoff); the call's span is not ERROR
RETRY_THROTTLED: Final = "throttled"
EVENT_RETRY: Final = "retry"
ATTR_RPC_SYSTEM: Final = "rpc.system"
ATTR_RPC_METHOD: Final = "rpc.method"

#: Instrumentation scope of every podnet span.
SCOPE_NAME: Final = "podnet"
