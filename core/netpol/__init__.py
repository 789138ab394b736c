"""Kubernetes NetworkPolicy in core: a policy object read field by field (:mod:`.wire`),
resolved against pods, namespaces and their addresses (:mod:`.resolve`), and the wire
formats of its realization — the policy's status annotation and the node agents' reports
(:mod:`.status`).

Pure functions over values: the controller's reconciler and the node agent both use them
(the agent enforces policy for the pods it plugged with the same resolution). This
package's ``__init__`` imports nothing.
"""
