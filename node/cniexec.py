"""The CNI specification's rules, in the agent (``POST /v1/cni/exec``, docs/node.md).

``podnet-cni`` and ``podnet-ipam`` are one static program that knows almost nothing: it
answers VERSION, and otherwise forwards the name it runs under, its ``CNI_*`` environment
and its stdin to the agent, and prints what the agent answers with the exit code it
names. :func:`execute` is what the plugin used to do itself: check the command, the
environment and the network configuration, pick the role (plugin or IPAM), ask the agent
(here: its methods, in this process) and turn the answer into the result of the version
the runtime asked for, chained onto ``prevResult``. Whatever goes wrong is the
specification's error object and exit code 1.

The program handles alone what needs no agent or finds none: VERSION, and an agent it
cannot reach (error 11, 50 for STATUS; DEL succeeding when nothing can be left behind).
"""

from __future__ import annotations

import json
import logging
import os
import string
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from podnet.core.models import DEFAULT_NETWORK
from podnet.node.protocol import (
    DECODING_FAILURE,
    DEFAULT_SOCKET,
    INCOMPATIBLE_VERSION,
    INTERNAL_ERROR,
    INVALID,
    INVALID_ENVIRONMENT,
    RESULT_VERSION,
    TRY_AGAIN,
    CniError,
    attachment_list,
    check_field,
)

log = logging.getLogger("podnet.node")

#: the specification versions podnet speaks, oldest first
SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
#: seconds the plugin waits for the agent unless ``agentTimeout`` says (the plugin's
#: default, above the agent's default ADD wait; the agent checks the field, the plugin uses it)
DEFAULT_AGENT_TIMEOUT = 60.0
#: the runtimeConfig capability that may carry the pod's identity
POD_CAPABILITY = "podnet.io/pod"
#: the names the program is installed under: the plugin, and the IPAM plugin
CNI_NAME = "podnet-cni"
IPAM_NAME = "podnet-ipam"

COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
#: the first specification version defining each command (all others: 0.3.1 or before)
SINCE = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}
#: CNI_ARGS keys podnet knows; others need IgnoreUnknown=1 (as runtimes send)
KNOWN_ARGS = ("IgnoreUnknown", "K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID",
              "K8S_POD_INFRA_CONTAINER_ID")
#: result fields the specification added in 1.1.0, dropped for older versions
NEW_IN_1_1 = {"interfaces": ("mtu", "socketPath", "pciID"),
              "routes": ("mtu", "advmss", "priority", "table", "scope")}

#: the most stdin (the network configuration) the agent reads of one exec request
MAX_STDIN = 4 << 20


class Backend(Protocol):
    """What :func:`execute` asks: the agent's answers to the protocol's requests (the
    bodies of ``/v1/cni/*`` and ``/v1/ipam/*``, docs/node.md). A failure is a
    :class:`CniError`; any other exception is the agent's fault (error 11)."""

    def add(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def delete(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def check(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def gc(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    def ipam_add(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def ipam_del(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def ipam_check(self, body: Mapping[str, Any]) -> dict[str, Any]: ...


# --- the wire format of POST /v1/cni/exec --------------------------------------------------

#: bytes a header carries as they are: the visible ASCII but '%'
_PLAIN = frozenset(range(0x21, 0x7F)) - {ord("%")}


def percent_encode(value: str) -> str:
    """A header value as the program sends it: every byte outside 0x21..0x7E, and '%',
    as ``%XX`` (upper-case hex). ``value``'s undecodable bytes (surrogate escapes) are
    sent as the bytes they were."""
    raw = value.encode("utf-8", "surrogateescape")
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in raw)


def percent_decode(value: str, what: str) -> str:
    """The inverse of :func:`percent_encode`; error 4 naming ``what`` when ``value`` is
    not in that form (a byte that should have been encoded, a '%' without two hex
    digits)."""
    out = bytearray()
    i = 0
    while i < len(value):
        c = value[i]
        if c == "%":
            pair = value[i + 1:i + 3]
            if len(pair) != 2 or not all(h in string.hexdigits for h in pair):
                raise CniError(INVALID_ENVIRONMENT, f"{what}: {value[:80]!r}: '%' at {i} is "
                               "not followed by two hex digits (the value is percent-encoded)")
            out.append(int(pair, 16))
            i += 3
            continue
        if ord(c) not in _PLAIN:
            raise CniError(INVALID_ENVIRONMENT, f"{what}: {value[:80]!r}: {c!r} at {i} is "
                           "not percent-encoded (only visible ASCII but '%' travels as it is)")
        out.append(ord(c))
        i += 1
    return out.decode("utf-8", "surrogateescape")


def decode_exec_headers(program: str | None, env_headers: Sequence[str]
                        ) -> tuple[str, dict[str, str]]:
    """(program name, environment) of an exec request's ``CNI-Program`` header and its
    ``CNI-Env`` headers (``NAME=value`` each, percent-encoded); error 4 naming the header
    when one is malformed."""
    name = percent_decode(program, "CNI-Program") if program else ""
    env: dict[str, str] = {}
    for header in env_headers:
        key, sep, value = header.partition("=")
        key = percent_decode(key, "CNI-Env")
        if not sep or not key.startswith("CNI_"):
            raise CniError(INVALID_ENVIRONMENT, f"CNI-Env: {header[:80]!r} is not "
                           "CNI_NAME=value (one header per CNI_ variable)")
        if key in env:
            raise CniError(INVALID_ENVIRONMENT, f"CNI-Env: {key} given twice")
        env[key] = percent_decode(value, f"CNI-Env {key}")
    return name, env


def exec_request(program: str | None, env_headers: Sequence[str], stdin: bytes,
                 backend: Backend) -> tuple[int, str]:
    """One ``POST /v1/cni/exec``: its headers decoded and :func:`execute` run; a
    malformed request is answered as any other error (the error object, exit code 1)."""
    try:
        name, env = decode_exec_headers(program, env_headers)
    except CniError as exc:
        return failure(exc, stdin)
    return execute(name, env, stdin, backend)


def failure(exc: CniError, stdin: bytes = b"") -> tuple[int, str]:
    """(exit code, stdout) of an invocation that failed with ``exc``: the error object in
    the version of the configuration on ``stdin`` (when it is one podnet speaks)."""
    return 1, _dump(exc.answer(_answer_version(stdin)))


# --- the network configuration and the environment -----------------------------------------


def parse_config(raw: bytes) -> dict[str, Any]:
    """The network configuration from stdin: a JSON object, else error 6."""
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CniError(DECODING_FAILURE, f"network configuration (stdin): not valid JSON: {exc}"
                       ) from None
    if not isinstance(config, dict):
        raise CniError(DECODING_FAILURE, "network configuration (stdin): not a JSON object, "
                       f"got {type(config).__name__}")
    return config


def _answer_version(raw: bytes) -> str:
    """The version an error is answered in: the configuration's ``cniVersion`` when it
    is one podnet speaks, else the newest."""
    try:
        version = json.loads(raw.decode("utf-8")).get("cniVersion")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return RESULT_VERSION
    return version if version in SUPPORTED_VERSIONS else RESULT_VERSION


def version_of(config: Mapping[str, Any], command: str) -> str:
    """The configuration's ``cniVersion``, checked against what podnet and the command
    support (error 1 when it does not, 7 when it is absent or not a string)."""
    version = config.get("cniVersion")
    if version is None:
        raise CniError(INVALID, "cniVersion: missing from the network configuration")
    if not isinstance(version, str):
        raise CniError(INVALID, f"cniVersion: must be a string, got {version!r}")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(INCOMPATIBLE_VERSION,
                       f"cniVersion {version!r}: incompatible CNI version, podnet "
                       f"supports {', '.join(SUPPORTED_VERSIONS)}")
    since = SINCE.get(command)
    if since is not None and _older(version, since):
        raise CniError(INCOMPATIBLE_VERSION,
                       f"cniVersion {version!r}: CNI_COMMAND {command} is defined from "
                       f"cniVersion {since} on")
    return version


def _older(version: str, than: str) -> bool:
    return SUPPORTED_VERSIONS.index(version) < SUPPORTED_VERSIONS.index(than)


def parse_cni_args(raw: str) -> dict[str, str]:
    """``CNI_ARGS`` (``K=V;K=V``): unknown keys are an error unless ``IgnoreUnknown`` is
    set (to 1 or true), as the runtimes send it."""
    args: dict[str, str] = {}
    for pair in raw.split(";"):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CniError(INVALID_ENVIRONMENT,
                           f"CNI_ARGS: {pair!r} is not KEY=VALUE (pairs are separated by ';')")
        args[key] = value.strip()
    ignore = args.get("IgnoreUnknown", "").lower() in ("1", "true")
    unknown = sorted(k for k in args if k not in KNOWN_ARGS)
    if unknown and not ignore:
        raise CniError(INVALID_ENVIRONMENT,
                       f"CNI_ARGS: unknown key(s) {', '.join(unknown)} (set IgnoreUnknown=1 "
                       "to ignore them)")
    return args


#: the pod's identity: (CNI_ARGS key, runtimeConfig key, the request's field)
_IDENTITY = (("K8S_POD_NAMESPACE", "namespace", "podNamespace"),
             ("K8S_POD_NAME", "name", "podName"),
             ("K8S_POD_UID", "uid", "podUid"))


def pod_identity(args: Mapping[str, str], config: Mapping[str, Any]
                 ) -> tuple[str, str, str | None]:
    """(namespace, name, uid) of the pod: from ``CNI_ARGS`` (``K8S_POD_NAMESPACE``,
    ``K8S_POD_NAME``, ``K8S_POD_UID``), else from the ``runtimeConfig`` capability
    ``podnet.io/pod`` (``{"namespace", "name", "uid"}``). Namespace and name are required;
    each must be what Kubernetes allows (error 7 naming where it came from); the uid is
    optional."""
    runtime = config.get("runtimeConfig")
    pod: Any = runtime.get(POD_CAPABILITY) if isinstance(runtime, dict) else None
    if pod is not None and not isinstance(pod, dict):
        raise CniError(INVALID, f"runtimeConfig.{POD_CAPABILITY}: must be an object, got {pod!r}")
    pod = pod or {}
    found: list[str | None] = []
    for arg, key, field in _IDENTITY:
        where = arg
        value: Any = args.get(arg)
        if not value:
            where = f"runtimeConfig.{POD_CAPABILITY}.{key}"
            value = pod.get(key)
            if value is not None and not isinstance(value, str):
                raise CniError(INVALID, f"{where}: must be a string")
        if value:
            check_field(field, value, shown_as=where)
        elif field != "podUid":
            raise CniError(INVALID, f"{arg}: missing (neither in CNI_ARGS nor in "
                                    f"runtimeConfig.{POD_CAPABILITY}.{key})")
        found.append(value or None)
    namespace, name, uid = found
    assert namespace is not None and name is not None
    return namespace, name, uid


def _environment(env: Mapping[str, str], variable: str, field: str) -> str:
    """A required ``CNI_*`` variable, checked as the request's ``field`` is (error 4
    naming the variable)."""
    value = env.get(variable, "")
    if not value:
        raise CniError(INVALID_ENVIRONMENT, f"{variable}: missing")
    check_field(field, value, shown_as=variable, code=INVALID_ENVIRONMENT)
    return value


def check_agent_settings(section: Mapping[str, Any], where: str = "") -> None:
    """``agentSocket`` and ``agentTimeout`` of ``section`` (the configuration, or its
    ``ipam`` section: ``where`` is the prefix naming it): the program uses them (falling
    back to the defaults when they are malformed), the agent it reached says they are."""
    path = section.get("agentSocket", DEFAULT_SOCKET)
    if not isinstance(path, str) or not path:
        raise CniError(INVALID, f"{where}agentSocket: must be a non-empty string, got {path!r}")
    value = section.get("agentTimeout", DEFAULT_AGENT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise CniError(INVALID, f"{where}agentTimeout: must be a positive number of "
                                f"seconds, got {value!r}")


def _network(config: Mapping[str, Any]) -> str:
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise CniError(INVALID, "name: missing from the network configuration"
                       if name is None else f"name: must be a non-empty string, got {name!r}")
    return name


def valid_attachments(config: Mapping[str, Any]) -> list[dict[str, str]]:
    """GC's ``cni.dev/valid-attachments`` (or the name an earlier draft of the
    specification gave it), checked as the agent checks the request's list."""
    key = "cni.dev/valid-attachments"
    if config.get(key) is None and config.get("cni.dev/attachments") is not None:
        key = "cni.dev/attachments"
    return attachment_list(config.get(key), key)


def ipam_section(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The ``ipam`` section and the podnet network it names (``ipam.network``, default
    the default network); error 7 naming the field when either is malformed."""
    section = config.get("ipam")
    if not isinstance(section, dict):
        raise CniError(INVALID, "ipam: missing from the network configuration (podnet-"
                                "ipam reads its section)" if section is None
                       else f"ipam: must be an object, got {type(section).__name__}")
    network = section.get("network", DEFAULT_NETWORK)
    if not isinstance(network, str) or not network:
        raise CniError(INVALID, f"ipam.network: must be a non-empty string, got {network!r}")
    return section, network


def acts_as_ipam(program: str, config: Mapping[str, Any]) -> bool:
    """Whether this invocation is podnet-ipam's. The name the program runs under decides
    when it is one of the two installed names; under any other the configuration does: a
    ``type`` string other than podnet-cni with an ``ipam`` section means another plugin
    is executing its IPAM plugin, which is this one. The static plugin applies the same
    rule to pick the socket it asks (cni/podnet-cni.c): a ``type`` that is no string is
    not another plugin's."""
    name = os.path.basename(program)
    if name in (IPAM_NAME, CNI_NAME):
        return name == IPAM_NAME
    kind = config.get("type")
    return (isinstance(kind, str) and kind != CNI_NAME
            and isinstance(config.get("ipam"), dict))


# --- results -------------------------------------------------------------------------------


def _normalize(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result of any supported version as a 1.1.0 one (0.x ``ips[].version`` dropped)."""
    out: dict[str, Any] = {"cniVersion": RESULT_VERSION}
    for key in ("interfaces", "ips", "routes"):
        items = result.get(key)
        if isinstance(items, list):
            out[key] = [dict(item) for item in items if isinstance(item, dict)]
    for ip in out.get("ips", []):
        ip.pop("version", None)
    if isinstance(result.get("dns"), dict):
        out["dns"] = dict(result["dns"])
    return out


def merge_prev(prev: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """A chained ADD's result: the previous plugins' result with podnet's interfaces,
    addresses and routes added (the addresses' interface indexes shifted past the previous
    interfaces); the previous DNS unless it is empty."""
    merged = _normalize(prev)
    mine = _normalize(ours)
    shift = len(merged.get("interfaces", []))
    for ip in mine.get("ips", []):
        if isinstance(ip.get("interface"), int):
            ip["interface"] += shift
    for key in ("interfaces", "ips", "routes"):
        if key in merged or key in mine:
            merged[key] = merged.get(key, []) + mine.get(key, [])
    if not merged.get("dns") and mine.get("dns"):
        merged["dns"] = mine["dns"]
    return merged


def convert_result(result: Mapping[str, Any], version: str) -> dict[str, Any]:
    """A 1.1.0 result as the requested version: 1.0.0 drops what 1.1.0 added (interface
    mtu, socketPath, pciID; route mtu, advmss, priority, table, scope); 0.4.0 and 0.3.1
    also give each address its ``version`` ("4" or "6")."""
    out = _normalize(result)
    out["cniVersion"] = version
    if version != "1.1.0":
        for key, fields in NEW_IN_1_1.items():
            for item in out.get(key, []):
                for name in fields:
                    item.pop(name, None)
    if _older(version, "1.0.0"):
        out["ips"] = [{"version": "6" if ":" in str(ip.get("address", "")) else "4", **ip}
                      for ip in out.get("ips", [])]
    return out


# --- the commands --------------------------------------------------------------------------


def execute(program: str, env: Mapping[str, str], stdin: bytes, backend: Backend
            ) -> tuple[int, str]:
    """One invocation of the plugin, as the runtime (or the chaining plugin) made it:
    ``program`` the name it runs under, ``env`` its ``CNI_*`` variables, ``stdin`` the
    network configuration. (exit code, stdout)."""
    role = CNI_NAME
    try:
        command = env.get("CNI_COMMAND", "")
        if not command:
            raise CniError(INVALID_ENVIRONMENT, "CNI_COMMAND: missing")
        if command not in COMMANDS:
            raise CniError(INVALID_ENVIRONMENT, f"CNI_COMMAND: unknown command {command!r} "
                                                f"(one of {', '.join(COMMANDS)})")
        if command == "VERSION":
            return 0, _dump({"cniVersion": RESULT_VERSION,
                             "supportedVersions": list(SUPPORTED_VERSIONS)})
        config = parse_config(stdin)
        version = version_of(config, command)
        if acts_as_ipam(program, config):
            role = IPAM_NAME
            answer = _dispatch_ipam(command, env, config, version, backend)
        else:
            answer = _dispatch(command, env, config, version, backend)
        return 0, "" if answer is None else _dump(answer)
    except CniError as exc:
        return failure(exc, stdin)
    except Exception as exc:  # the runtime still gets the error object it expects
        log.exception("%s %s failed", role, env.get("CNI_COMMAND"))
        return failure(CniError(INTERNAL_ERROR, f"{role} internal error: "
                                f"{type(exc).__name__}: {exc}"), stdin)


def _ask(fn: Any, *args: Any) -> dict[str, Any]:
    """The agent's answer; an exception that is not its CNI error is its own failure,
    answered as the protocol's routes answer it (error 11), not as the caller's."""
    try:
        answer: dict[str, Any] = fn(*args)
    except CniError:
        raise
    except Exception as exc:
        log.exception("podnet node agent: %s failed", getattr(fn, "__name__", fn))
        raise CniError(TRY_AGAIN, f"podnet node agent: {exc}", details=type(exc).__name__
                       ) from exc
    return answer


def _dispatch(command: str, env: Mapping[str, str], config: dict[str, Any], version: str,
              backend: Backend) -> dict[str, Any] | None:
    check_agent_settings(config)
    if command == "STATUS":
        _ask(backend.status)
        return None
    network = _network(config)
    if command == "GC":
        _ask(backend.gc, {"cniVersion": version, "network": network, "config": config,
                          "validAttachments": valid_attachments(config)})
        return None
    body = _attachment_body(command, env, config, version, network, netns_required=True)
    if command == "DEL":
        _ask(backend.delete, body)
        return None
    if command == "CHECK":
        _ask(backend.check, body)
        return None
    result = _ask(backend.add, body)
    prev = config.get("prevResult")
    if isinstance(prev, dict):
        result = merge_prev(prev, result)
    return convert_result(result, version)


def _dispatch_ipam(command: str, env: Mapping[str, str], config: dict[str, Any],
                   version: str, backend: Backend) -> dict[str, Any] | None:
    section, network = ipam_section(config)
    check_agent_settings(section, "ipam.")
    if command == "STATUS":
        _ask(backend.status)
        return None
    if command == "GC":
        # the IPAM role holds nothing on the host: the controller releases addresses
        return None
    # IPAM plumbs nothing in the pod's namespace: CNI_NETNS is passed on, not required
    body = _attachment_body(command, env, config, version, network, netns_required=False)
    if command == "DEL":
        _ask(backend.ipam_del, body)
        return None
    if command == "CHECK":
        _ask(backend.ipam_check, body)
        return None
    return convert_result(_ask(backend.ipam_add, body), version)


def _attachment_body(command: str, env: Mapping[str, str], config: dict[str, Any],
                     version: str, network: str, *, netns_required: bool) -> dict[str, Any]:
    """The request body of ADD, DEL and CHECK (and of their IPAM forms) from the
    environment: the container, its netns and interface, the pod."""
    container = _environment(env, "CNI_CONTAINERID", "containerId")
    netns = env.get("CNI_NETNS") or None
    if netns_required and command in ("ADD", "CHECK"):
        if netns is None:
            raise CniError(INVALID_ENVIRONMENT,
                           f"CNI_NETNS: missing (required for {command})")
        netns = _environment(env, "CNI_NETNS", "netns")
    if_name = _environment(env, "CNI_IFNAME", "ifName")
    namespace, name, uid = pod_identity(parse_cni_args(env.get("CNI_ARGS", "")), config)
    return {"cniVersion": version, "containerId": container, "netns": netns,
            "ifName": if_name, "podNamespace": namespace, "podName": name, "podUid": uid,
            "network": network, "config": config}


def _dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"
