"""The chart's values.schema.json, built here so that its pool-policy part comes from
podnet's own model (``PoolPolicy``, ``RateLimit``, ``Backoff``: their fields, types and
bounds) and its ``networkPolicy.enforce`` from core's list; scripts/render_deploy.py
writes it, tests/test_chart.py fails when the file is not what this builds.

JSON Schema draft-07, which both Helm 3 and Helm 4 read. Every object the chart owns
refuses keys it does not know (``additionalProperties: false``): a typo is an error
naming the key, not a value silently ignored. The maps that are the operator's own
(labels, annotations, node selectors, a provider's section) take any key.
"""

from __future__ import annotations

from typing import Any

import attrs

from podnet.core.config import NETWORK_POLICY_ENGINES
from podnet.hookspecs.errors import ConfigError
from podnet.hookspecs.policy import Backoff, PoolPolicy, RateLimit

Schema = dict[str, Any]

DNS1123_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: a Kubernetes quantity ("200m", "256Mi", "1.5", "1e3"), not negative
QUANTITY = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]+)?$"


def closed(properties: Schema, *, required: tuple[str, ...] = (), **more: Any) -> Schema:
    """An object of exactly these keys."""
    out: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = list(required)
    return {**out, **more}


def map_of(value: Schema, **more: Any) -> Schema:
    return {"type": "object", "additionalProperties": value, **more}


def ref(name: str) -> Schema:
    return {"$ref": f"#/definitions/{name}"}


STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
SECONDS = {"type": "number", "exclusiveMinimum": 0}
COUNT = {"type": "integer", "minimum": 1}


def _kubernetes_definitions() -> Schema:
    """The few Kubernetes types the values pass through, closed as Kubernetes has them
    (kubernetes-validate checks the rendered objects completely; this names the key)."""
    quantities = map_of({"type": ["string", "number"], "pattern": QUANTITY})
    return {
        "resources": closed({"requests": quantities, "limits": quantities,
                             "claims": {"type": "array", "items": closed(
                                 {"name": STRING, "request": STRING}, required=("name",))}}),
        "tolerations": {"type": "array", "items": closed({
            "key": STRING,
            "operator": {"enum": ["Exists", "Equal"]},
            "value": STRING,
            "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute", ""]},
            "tolerationSeconds": {"type": "integer"},
        })},
        "stringMap": map_of(STRING),
        "envVar": closed({"name": {"type": "string", "minLength": 1}, "value": STRING,
                          "valueFrom": {"type": "object"}}, required=("name",)),
        "extraEnv": {"type": "array", "items": ref("envVar")},
        "extraArgs": {"type": "array", "items": STRING},
        # on the host network only these two mean something (ClusterFirst is Default there)
        "dnsPolicy": {"enum": ["Default", "ClusterFirstWithHostNet"]},
        "serviceAccount": closed({"annotations": ref("stringMap")}),
        "probe": closed({"periodSeconds": COUNT, "timeoutSeconds": COUNT,
                         "failureThreshold": COUNT, "successThreshold": COUNT,
                         "initialDelaySeconds": {"type": "integer", "minimum": 0}}),
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _bounds(cls: type[Any], field: str) -> Schema:
    """What the model's validator allows, found by asking it: > 0 or >= 0."""
    def refused(value: float) -> bool:
        try:
            cls(**{field: value})
        except ConfigError:
            return True
        return False

    if refused(0):
        return {"exclusiveMinimum": 0}
    return {"minimum": 0} if refused(-1) else {}


_TYPES = {int: "integer", float: "number", bool: "boolean"}


def _model(cls: type[Any]) -> Schema:
    """An attrs class of the config as a closed object; snake_case or camelCase keys, as
    podnet's parser takes them (core/config.py)."""
    properties: Schema = {}
    for field in attrs.fields(attrs.resolve_types(cls)):
        kind = field.type
        if kind in (RateLimit, Backoff):
            schema = ref(kind.__name__[0].lower() + kind.__name__[1:])
        elif field.name == "cloud_rates":
            # per cloud API (action) name: {rate, burst}
            schema = map_of(ref("rateLimit"))
        elif kind in _TYPES:
            schema = {"type": _TYPES[kind]}
            if kind is not bool:
                schema.update(_bounds(cls, field.name))
        else:  # pragma: no cover - a new field's type: say how the values take it
            raise TypeError(f"{cls.__name__}.{field.name}: no schema for {kind!r}")
        for key in dict.fromkeys((field.name, _camel(field.name))):
            properties[key] = schema
    return closed(properties)


def _config() -> Schema:
    """The config file's keys less those the chart sets (leaderElection, networkPolicy,
    listen come from its own values); core/config.py is what it follows, and
    tests/test_chart_schema.py checks the two agree key by key."""
    return closed({
        "defaultProvider": {"type": "string", "minLength": 1},
        "nodeProviders": {"type": "array", "items": closed(
            {"provider": {"type": "string", "minLength": 1},
             "nodeSelector": {"type": "string", "pattern": r"\S"}},
            required=("provider", "nodeSelector"))},
        "networks": map_of(
            closed({"provider": {"type": "string", "minLength": 1}}, required=("provider",)),
            propertyNames={"pattern": DNS1123_LABEL, "maxLength": 63,
                           "not": {"const": "default"}}),
        # each provider checks its own section when podnet starts (plugins may be another
        # project's, so the chart cannot know their keys)
        "providers": map_of({"type": ["object", "null"]}),
        "policies": map_of(ref("poolPolicy")),
        "workers": {"type": "integer", "minimum": 1, "maximum": 256},
        "workerStallSeconds": SECONDS,
    })


def _component(**specific: Schema) -> Schema:
    """What the controller and the agent both take."""
    return closed({
        "priorityClassName": STRING,
        "tolerations": ref("tolerations"),
        "nodeSelector": ref("stringMap"),
        "resources": ref("resources"),
        "dnsPolicy": ref("dnsPolicy"),
        "extraArgs": ref("extraArgs"),
        "extraEnv": ref("extraEnv"),
        "podAnnotations": ref("stringMap"),
        "podLabels": ref("stringMap"),
        "serviceAccount": ref("serviceAccount"),
        **specific,
    })


def _enabled_with_labels() -> Schema:
    return closed({"enabled": BOOLEAN, "labels": ref("stringMap")})


def values_schema() -> Schema:
    name = {"type": "string", "pattern": f"^$|{DNS1123_LABEL}"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "podnet chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            # a parent chart's globals, when podnet is its subchart
            "global": {"type": "object"},
            "nameOverride": {**name, "maxLength": 40},
            "fullnameOverride": {**name, "maxLength": 46},
            "image": closed({
                "repository": {"type": "string", "minLength": 1},
                "tag": STRING,
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            }),
            "imagePullSecrets": {"type": "array", "items": closed(
                {"name": {"type": "string", "minLength": 1}}, required=("name",))},
            "config": _config(),
            "credentials": closed({
                "secretName": {"type": "string", "pattern": DNS1123_SUBDOMAIN},
                "required": BOOLEAN,
            }),
            "networkPolicy": closed({"enforce": {"enum": list(NETWORK_POLICY_ENGINES)}}),
            # the config file's leaderElection, less enabled and namespace (the chart's)
            "leaderElection": closed({
                "name": {"type": "string", "pattern": DNS1123_SUBDOMAIN},
                "leaseDurationSeconds": SECONDS,
                "renewDeadlineSeconds": SECONDS,
                "retryPeriodSeconds": SECONDS,
            }),
            "controller": _component(
                replicas={"type": "integer", "minimum": 0},
                listenHost={"type": "string", "minLength": 1},
                port=PORT,
                podDisruptionBudget=closed({"maxUnavailable": {
                    "type": ["integer", "string"], "minimum": 0,
                    "pattern": "^[0-9]+%$"}}),
            ),
            "cni": closed({
                # its values: templates/_helpers.tpl's podnet.cniDirs says which
                "mode": STRING,
                "uninstall": BOOLEAN,
                "resources": ref("resources"),
            }),
            "node": _component(
                socketDir={"type": "string", "pattern": "^/"},
                cniBinDir={"type": "string", "pattern": "^/"},
                cniConfDir={"type": "string", "pattern": "^/"},
                network={"type": "string", "minLength": 1},
                credentials=BOOLEAN,
                extraHostPaths={"type": "array", "items": closed(
                    {"name": {"type": "string", "pattern": DNS1123_LABEL},
                     "path": {"type": "string", "pattern": "^/"}},
                    required=("name", "path"))},
                health=closed({
                    # the probes ask 127.0.0.1: the listener must answer there
                    "host": {"type": "string", "enum": ["127.0.0.1", "0.0.0.0"]},
                    "port": PORT,
                    "stuckAfterSeconds": SECONDS,
                    "startupProbe": ref("probe"),
                    "livenessProbe": ref("probe"),
                    "readinessProbe": ref("probe"),
                }),
            ),
            "metrics": closed({
                "service": closed({"enabled": BOOLEAN}),
                "serviceMonitor": closed({
                    "enabled": BOOLEAN,
                    "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                    "labels": ref("stringMap"),
                }),
            }),
            # the PrometheusRule and the Grafana dashboard (templates/prometheusrule.yaml,
            # templates/dashboard.yaml)
            "monitoring": closed({
                "prometheusRule": _enabled_with_labels(),
                "dashboard": _enabled_with_labels(),
            }),
        },
        "definitions": {
            **_kubernetes_definitions(),
            "poolPolicy": _model(PoolPolicy),
            "rateLimit": _model(RateLimit),
            "backoff": _model(Backoff),
        },
    }

