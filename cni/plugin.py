#!/usr/bin/env python3
"""podnet-cni and podnet-ipam: the CNI plugin the container runtime executes (CNI
specification 1.1.0), and the IPAM plugin other CNI plugins execute.

This file is self-contained on purpose: it imports the standard library only, so it starts
fast and can be installed onto a host as one executable script (the DaemonSet's init step
copies it to the CNI binary directory under the name the network configuration's ``type``
gives). It never talks to the API server: every command except VERSION is a request to the
node agent (``podnet node``) over a unix socket, HTTP/1.1 with JSON bodies. docs/node.md
describes the protocol and the plugin's configuration.

Commands: ADD, DEL, CHECK, STATUS, GC, VERSION. The network configuration comes on stdin,
the parameters in the ``CNI_*`` environment variables; the result or the error object is
printed on stdout, and an error exits with status 1.

The same file is both plugins; which one it is comes from the name it runs under
(``podnet-ipam`` or ``podnet-cni``), else from the configuration (see ``acts_as_ipam``).
As ``podnet-ipam`` it plumbs nothing: it reads the ``ipam`` section, asks the agent for a
PodNetwork's addresses and routes, and prints an IPAM result for the calling plugin.
"""

from __future__ import annotations

import json
import os
import sys

# typing and collections.abc cost the start-up milliseconds: names for the type checker only
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: the specification versions this plugin speaks, oldest first
SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
#: the version of the results the agent answers with, and of this plugin's own answers
SPEC_VERSION = "1.1.0"
DEFAULT_SOCKET = "/run/podnet/agent.sock"
#: seconds the plugin waits for the agent's answer; above the agent's default ADD wait (30 s)
DEFAULT_TIMEOUT = 60.0
#: the runtimeConfig capability that may carry the pod's identity
POD_CAPABILITY = "podnet.io/pod"
#: the names this file is installed under: the plugin, and the IPAM plugin
CNI_NAME = "podnet-cni"
IPAM_NAME = "podnet-ipam"
#: the podnet network whose PodNetwork podnet-ipam returns when ``ipam.network`` is absent
IPAM_DEFAULT_NETWORK = "default"

COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
#: the first specification version defining each command (all others: 0.3.1 or before)
SINCE = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}

# error codes of the specification
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
#: this plugin's own code (100 and above are the plugins'): a failure of the plugin itself
INTERNAL_ERROR = 100

#: CNI_ARGS keys this plugin knows; others need IgnoreUnknown=1 (as runtimes send)
KNOWN_ARGS = ("IgnoreUnknown", "K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID",
              "K8S_POD_INFRA_CONTAINER_ID")
#: result fields the specification added in 1.1.0, dropped for older versions
NEW_IN_1_1 = {"interfaces": ("mtu", "socketPath", "pciID"),
              "routes": ("mtu", "advmss", "priority", "table", "scope")}


class CniError(Exception):
    """A failure the plugin reports as the specification's error object."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, version: str) -> dict[str, Any]:
        answer: dict[str, Any] = {"cniVersion": version, "code": self.code, "msg": self.msg}
        if self.details:
            answer["details"] = self.details
        return answer


class AgentDown(CniError):
    """The CNI error for an agent that could not be reached."""


class AgentUnreachable(Exception):
    """The agent could not be asked, or did not answer (connect, send, read, timeout)."""


# --- input ---------------------------------------------------------------------------------


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


def version_of(config: Mapping[str, Any], command: str) -> str:
    """The configuration's ``cniVersion``, checked against what this plugin and the command
    support (error 1 when it does not, 7 when it is absent or not a string)."""
    version = config.get("cniVersion")
    if version is None:
        raise CniError(INVALID_CONFIG, "cniVersion: missing from the network configuration")
    if not isinstance(version, str):
        raise CniError(INVALID_CONFIG, f"cniVersion: must be a string, got {version!r}")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(INCOMPATIBLE_VERSION,
                       f"cniVersion {version!r}: incompatible CNI version, this plugin "
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


def pod_identity(args: Mapping[str, str], config: Mapping[str, Any]
                 ) -> tuple[str, str, str | None]:
    """(namespace, name, uid) of the pod: from ``CNI_ARGS`` (``K8S_POD_NAMESPACE``,
    ``K8S_POD_NAME``, ``K8S_POD_UID``), else from the ``runtimeConfig`` capability
    ``podnet.io/pod`` (``{"namespace", "name", "uid"}``). Namespace and name are required
    (error 7 naming the field); the uid is optional."""
    runtime = config.get("runtimeConfig")
    pod: Any = runtime.get(POD_CAPABILITY) if isinstance(runtime, dict) else None
    if pod is not None and not isinstance(pod, dict):
        raise CniError(INVALID_CONFIG,
                       f"runtimeConfig.{POD_CAPABILITY}: must be an object, got {pod!r}")
    pod = pod or {}

    def field(arg: str, key: str) -> str | None:
        value = args.get(arg)
        if value:
            return value
        value = pod.get(key)
        if value is not None and not isinstance(value, str):
            raise CniError(INVALID_CONFIG,
                           f"runtimeConfig.{POD_CAPABILITY}.{key}: must be a string")
        return value or None

    namespace = field("K8S_POD_NAMESPACE", "namespace")
    name = field("K8S_POD_NAME", "name")
    for arg, key, value in (("K8S_POD_NAMESPACE", "namespace", namespace),
                            ("K8S_POD_NAME", "name", name)):
        if not value:
            raise CniError(INVALID_CONFIG,
                           f"{arg}: missing (neither in CNI_ARGS nor in "
                           f"runtimeConfig.{POD_CAPABILITY}.{key})")
    assert namespace is not None and name is not None
    return namespace, name, field("K8S_POD_UID", "uid")


def _container_id(env: Mapping[str, str]) -> str:
    value = env.get("CNI_CONTAINERID", "")
    if not value:
        raise CniError(INVALID_ENVIRONMENT, "CNI_CONTAINERID: missing")
    if not all((c.isascii() and c.isalnum()) or c in "_-." for c in value):
        raise CniError(INVALID_ENVIRONMENT,
                       f"CNI_CONTAINERID: {value!r} has characters other than letters, "
                       "digits, '_', '-' and '.'")
    return value


def _ifname(env: Mapping[str, str]) -> str:
    value = env.get("CNI_IFNAME", "")
    if not value:
        raise CniError(INVALID_ENVIRONMENT, "CNI_IFNAME: missing")
    if (len(value.encode()) > 15 or value in (".", "..")
            or any(c in "/:" or c.isspace() for c in value)):
        raise CniError(INVALID_ENVIRONMENT,
                       f"CNI_IFNAME: {value!r} is not a valid interface name (at most 15 "
                       "bytes, no '/', ':' or white space, not '.' or '..')")
    return value


def _socket_path(section: Mapping[str, Any], where: str = "") -> str:
    """``agentSocket`` of ``section`` (the configuration, or its ``ipam`` section: ``where``
    is the prefix naming it in messages)."""
    path = section.get("agentSocket", DEFAULT_SOCKET)
    if not isinstance(path, str) or not path:
        raise CniError(INVALID_CONFIG,
                       f"{where}agentSocket: must be a non-empty string, got {path!r}")
    return path


def _timeout(section: Mapping[str, Any], where: str = "") -> float:
    value = section.get("agentTimeout", DEFAULT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise CniError(INVALID_CONFIG, f"{where}agentTimeout: must be a positive number of "
                       f"seconds, got {value!r}")
    return float(value)


def _network(config: Mapping[str, Any]) -> str:
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise CniError(INVALID_CONFIG, "name: missing from the network configuration"
                       if name is None else f"name: must be a non-empty string, got {name!r}")
    return name


def _valid_attachments(config: Mapping[str, Any]) -> list[dict[str, str]]:
    key = "cni.dev/valid-attachments"
    found = config.get(key)
    if found is None:  # the name an earlier draft of the specification used
        key = "cni.dev/attachments"
        found = config.get(key)
    if found is None:
        raise CniError(INVALID_CONFIG, "cni.dev/valid-attachments: missing (GC without it "
                       "would remove every attachment of the network)")
    if not isinstance(found, list):
        raise CniError(INVALID_CONFIG, f"{key}: must be a list, got {type(found).__name__}")
    attachments = []
    for i, item in enumerate(found):
        if not (isinstance(item, dict) and isinstance(item.get("containerID"), str)
                and isinstance(item.get("ifname"), str)):
            raise CniError(INVALID_CONFIG,
                           f"{key}[{i}]: must be an object with string containerID and ifname")
        attachments.append({"containerID": item["containerID"], "ifname": item["ifname"]})
    return attachments


# --- the agent -----------------------------------------------------------------------------


def agent_request(path: str, method: str, target: str, body: Any, timeout: float
                  ) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange with the agent on its unix socket: (status, body). Written on
    the socket module, not http.client, which would cost the start-up its imports; socket
    itself is imported here, as VERSION needs no agent."""
    import socket

    data = b"" if body is None else json.dumps(body).encode("utf-8")
    head = (f"{method} {target} HTTP/1.1\r\nHost: podnet-agent\r\nUser-Agent: podnet-cni\r\n"
            f"Accept: application/json\r\nConnection: close\r\nContent-Length: {len(data)}\r\n")
    if body is not None:
        head += "Content-Type: application/json\r\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            # the answer gets what the retries of the connect left of the timeout
            sock.settimeout(_connect(sock, path, timeout))
            sock.sendall(head.encode("ascii") + b"\r\n" + data)
            with sock.makefile("rb") as stream:
                return _read_response(stream)
    except TimeoutError:
        raise AgentUnreachable(f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise AgentUnreachable(exc.strerror or str(exc)) from None
    except ValueError as exc:  # a length or chunk size that is no number
        raise AgentUnreachable(f"malformed HTTP answer: {exc}") from None


def _connect(sock: Any, path: str, timeout: float) -> float:
    """Connect, trying again while the agent's listen backlog is full (EAGAIN: it is
    there, busy with a burst of requests), within ``timeout``; what is left of it."""
    import time

    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            sock.connect(path)
            return max(deadline - time.monotonic(), 0.001)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.1)


def _read_response(stream: Any) -> tuple[int, bytes]:
    status_line = stream.readline(65537)
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise AgentUnreachable(f"not an HTTP answer: {status_line[:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    while True:
        line = stream.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int(stream.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            chunks.append(stream.read(size))
            stream.readline(3)
        return status, b"".join(chunks)
    if "content-length" in headers:
        length = int(headers["content-length"])
        payload: bytes = stream.read(length)
        if len(payload) < length:
            raise AgentUnreachable("the answer ended early")
        return status, payload
    return status, stream.read()


def ask_agent(section: Mapping[str, Any], method: str, target: str, body: Any,
              unavailable: int, where: str = "") -> dict[str, Any]:
    """The agent's answer to one request: the JSON object of a 2xx, else the CNI error it
    answered (raised as it is). ``unavailable`` is the code for an agent that cannot be
    reached or answers something that is no CNI error. ``section`` holds ``agentSocket``
    and ``agentTimeout`` (named with the prefix ``where`` in messages)."""
    path = _socket_path(section, where)
    timeout = _timeout(section, where)
    try:
        status, payload = agent_request(path, method, target, body, timeout)
    except AgentUnreachable as exc:
        raise AgentDown(unavailable, f"podnet node agent not reachable at {path}: {exc}"
                        ) from None
    try:
        answer = json.loads(payload.decode("utf-8")) if payload.strip() else {}
    except (UnicodeDecodeError, ValueError):
        answer = None
    if 200 <= status < 300:
        if not isinstance(answer, dict):
            raise CniError(unavailable, f"podnet node agent at {path} answered {target} "
                           f"with something other than a JSON object: {payload[:200]!r}")
        return answer
    if (isinstance(answer, dict) and isinstance(answer.get("code"), int)
            and not isinstance(answer.get("code"), bool)):
        raise CniError(answer["code"], str(answer.get("msg", "")),
                       str(answer.get("details", "") or ""))
    raise CniError(unavailable, f"podnet node agent at {path} answered {target} with HTTP "
                   f"{status} and no CNI error: {payload[:200]!r}")


# --- results -------------------------------------------------------------------------------


def _normalize(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result of any supported version as a 1.1.0 one (0.x ``ips[].version`` dropped)."""
    out: dict[str, Any] = {"cniVersion": SPEC_VERSION}
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
    """A chained ADD's result: the previous plugins' result with this plugin's interfaces,
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


def acts_as_ipam(program: str, config: Mapping[str, Any]) -> bool:
    """Whether this invocation is podnet-ipam's. The name the file runs under decides when
    it is one of the two installed names; under any other (``python -m podnet.cni``, the
    source file) the configuration does: a ``type`` other than podnet-cni with an ``ipam``
    section means another plugin is executing its IPAM plugin, which is this file."""
    name = os.path.basename(program)
    if name in (IPAM_NAME, CNI_NAME):
        return name == IPAM_NAME
    return config.get("type", CNI_NAME) != CNI_NAME and isinstance(config.get("ipam"), dict)


def run(env: Mapping[str, str], stdin: bytes, program: str = "") -> tuple[int, str]:
    """One invocation: (exit status, stdout). ``program`` is the name the file runs under
    (``sys.argv[0]``): it may pick the IPAM role."""
    version = SPEC_VERSION
    role = CNI_NAME
    try:
        command = env.get("CNI_COMMAND", "")
        if not command:
            raise CniError(INVALID_ENVIRONMENT, "CNI_COMMAND: missing")
        if command not in COMMANDS:
            raise CniError(INVALID_ENVIRONMENT, f"CNI_COMMAND: unknown command {command!r} "
                           f"(one of {', '.join(COMMANDS)})")
        if command == "VERSION":
            return 0, _dump({"cniVersion": SPEC_VERSION,
                             "supportedVersions": list(SUPPORTED_VERSIONS)})
        config = parse_config(stdin)
        version = version_of(config, command)
        if acts_as_ipam(program, config):
            role = IPAM_NAME
            answer = _dispatch_ipam(command, env, config, version)
        else:
            answer = _dispatch(command, env, config, version)
        return 0, "" if answer is None else _dump(answer)
    except CniError as exc:
        return 1, _dump(exc.to_json(version))
    except Exception as exc:  # the runtime still gets the error object it expects
        return 1, _dump(CniError(INTERNAL_ERROR, f"{role} internal error: "
                                 f"{type(exc).__name__}: {exc}").to_json(version))


def _dispatch(command: str, env: Mapping[str, str], config: dict[str, Any], version: str
              ) -> dict[str, Any] | None:
    if command == "STATUS":
        ask_agent(config, "GET", "/v1/cni/status", None, NOT_AVAILABLE)
        return None
    network = _network(config)
    if command == "GC":
        attachments = _valid_attachments(config)
        ask_agent(config, "POST", "/v1/cni/gc",
                  {"cniVersion": version, "network": network, "config": config,
                   "validAttachments": attachments}, TRY_AGAIN_LATER)
        return None
    body = _attachment_body(command, env, config, version, network, netns_required=True)
    netns = body["netns"]
    if command == "DEL":
        try:
            ask_agent(config, "POST", "/v1/cni/del", body, TRY_AGAIN_LATER)
        except AgentDown:
            # nothing is left to tear down in a namespace that is gone; the agent's own
            # reconciliation removes the host side when it is back
            if netns is not None and os.path.exists(netns):
                raise
        return None
    if command == "CHECK":
        ask_agent(config, "POST", "/v1/cni/check", body, TRY_AGAIN_LATER)
        return None
    result = ask_agent(config, "POST", "/v1/cni/add", body, TRY_AGAIN_LATER)
    prev = config.get("prevResult")
    if isinstance(prev, dict):
        result = merge_prev(prev, result)
    return convert_result(result, version)


def _attachment_body(command: str, env: Mapping[str, str], config: dict[str, Any],
                     version: str, network: str, *, netns_required: bool) -> dict[str, Any]:
    """The request body of ADD, DEL and CHECK (and of their IPAM forms) from the
    environment: the container, its netns and interface, the pod."""
    container = _container_id(env)
    netns = env.get("CNI_NETNS") or None
    if netns is None and netns_required and command in ("ADD", "CHECK"):
        raise CniError(INVALID_ENVIRONMENT, f"CNI_NETNS: missing (required for {command})")
    ifname = _ifname(env)
    namespace, name, uid = pod_identity(parse_cni_args(env.get("CNI_ARGS", "")), config)
    return {"cniVersion": version, "containerId": container, "netns": netns,
            "ifName": ifname, "podNamespace": namespace, "podName": name, "podUid": uid,
            "network": network, "config": config}


# --- podnet-ipam: the IPAM role ------------------------------------------------------------


def ipam_section(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The ``ipam`` section and the podnet network it names (``ipam.network``, default
    ``default``); error 7 naming the field when either is malformed."""
    section = config.get("ipam")
    if not isinstance(section, dict):
        raise CniError(INVALID_CONFIG, "ipam: missing from the network configuration (podnet-"
                       "ipam reads its section)" if section is None
                       else f"ipam: must be an object, got {type(section).__name__}")
    network = section.get("network", IPAM_DEFAULT_NETWORK)
    if not isinstance(network, str) or not network:
        raise CniError(INVALID_CONFIG,
                       f"ipam.network: must be a non-empty string, got {network!r}")
    return section, network


def _dispatch_ipam(command: str, env: Mapping[str, str], config: dict[str, Any],
                   version: str) -> dict[str, Any] | None:
    section, network = ipam_section(config)
    if command == "STATUS":
        ask_agent(section, "GET", "/v1/cni/status", None, NOT_AVAILABLE, "ipam.")
        return None
    if command == "GC":
        # the IPAM role holds nothing on the host: the controller releases addresses
        return None
    # IPAM plumbs nothing in the pod's namespace: CNI_NETNS is passed on, not required
    body = _attachment_body(command, env, config, version, network, netns_required=False)
    if command == "DEL":
        try:
            ask_agent(section, "POST", "/v1/ipam/del", body, TRY_AGAIN_LATER, "ipam.")
        except AgentDown:
            pass  # DEL releases nothing, so an absent agent leaves nothing behind
        return None
    if command == "CHECK":
        ask_agent(section, "POST", "/v1/ipam/check", body, TRY_AGAIN_LATER, "ipam.")
        return None
    result = ask_agent(section, "POST", "/v1/ipam/add", body, TRY_AGAIN_LATER, "ipam.")
    return convert_result(result, version)


def _dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"


def main() -> int:
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    status, out = run(os.environ, stdin, sys.argv[0] if sys.argv else "")
    sys.stdout.write(out)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
