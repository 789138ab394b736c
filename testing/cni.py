"""A driver that runs ``podnet-cni`` exactly as a container runtime does.

``run_cni(command, config, env)`` starts the plugin as a new process with the ``CNI_*``
environment and the network configuration on stdin, and returns its exit status and stdout
(parsed when it is JSON) as a ``CniResult``. It runs the static executable built from
``cni/podnet-cni.c`` (:func:`plugin_path`, which builds it when it is missing or older
than its source), under the name ``podnet-cni``, or ``podnet-ipam`` with ``ipam=True``;
pass ``argv`` to run another form (an installed copy, the plugin under a runtime).

The node agent's tests use it too: point ``agentSocket`` in the config at the agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
#: the plugin's source and the script that builds it (a source checkout's)
PLUGIN_SOURCE = ROOT / "cni" / "podnet-cni.c"
BUILD_SCRIPT = ROOT / "scripts" / "build-cni.sh"
PLUGIN_NAME = "podnet-cni"
IPAM_NAME = "podnet-ipam"


def _fresh(binary: Path) -> bool:
    """An executable ELF file built after the plugin's source (when the source is here)."""
    try:
        with binary.open("rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
        built = binary.stat().st_mtime_ns
    except OSError:
        return False
    sources = [p for p in (PLUGIN_SOURCE, BUILD_SCRIPT, ROOT / "pyproject.toml") if p.exists()]
    return os.access(binary, os.X_OK) and all(built > p.stat().st_mtime_ns for p in sources)


def plugin_dir() -> Path:
    """Where the plugin is built: beside this environment's podnet scripts (where ``make``
    puts it and ``podnet install-cni`` takes it from), else ``build/cni`` of the checkout
    when that directory is not writable."""
    scripts = Path(sysconfig.get_path("scripts"))
    return scripts if os.access(scripts, os.W_OK) else ROOT / "build" / "cni"


def plugin_path(name: str = PLUGIN_NAME) -> Path:
    """The static plugin (``podnet-cni``, or the same file as ``podnet-ipam``), built with
    ``scripts/build-cni.sh`` first when it is absent, not an executable, or older than its
    source: so that pytest alone, without ``make``, runs the current plugin."""
    found = plugin_dir() / name
    if _fresh(found) and _fresh(found.with_name(IPAM_NAME if name == PLUGIN_NAME
                                                else PLUGIN_NAME)):
        return found
    if not BUILD_SCRIPT.exists():
        raise FileNotFoundError(f"{found}: the CNI plugin is not built, and "
                                f"{BUILD_SCRIPT} (a source checkout's) is not there to build it")
    done = subprocess.run(["bash", str(BUILD_SCRIPT), str(found.parent)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} {found.parent}: exit {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()}")
    return found


def plugin_argv(ipam: bool = False) -> list[str]:
    """The command line of the plugin as a runtime runs it: the executable, by the name
    that picks its role."""
    return [str(plugin_path(IPAM_NAME if ipam else PLUGIN_NAME))]


#: the specification versions podnet speaks
SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")


@attrs.frozen
class CniResult:
    """What the runtime sees of one invocation."""

    exit_code: int
    stdout: str
    stderr: str = ""

    @property
    def output(self) -> Any:
        """stdout as JSON (None when it is empty)."""
        return json.loads(self.stdout) if self.stdout.strip() else None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def error_code(self) -> int | None:
        """The CNI error code of a failed invocation (None when it succeeded)."""
        if self.ok:
            return None
        out = self.output
        return int(out["code"]) if isinstance(out, dict) and "code" in out else None

    def check_error(self, code: int, *names: str) -> dict[str, Any]:
        """Assert this is the spec's error object with ``code`` whose message names each of
        ``names``; return it."""
        assert self.exit_code == 1, f"expected exit status 1, got {self.exit_code}: {self}"
        out = self.output
        assert isinstance(out, dict), f"the error is not a JSON object: {self.stdout!r}"
        assert set(out) <= {"cniVersion", "code", "msg", "details"}, out
        # the configuration's version when it is one the plugin speaks, else 1.1.0
        assert out.get("cniVersion") in SUPPORTED_VERSIONS, out
        assert out["code"] == code, f"expected code {code}: {out}"
        for name in names:
            assert name in out["msg"], f"the message does not name {name!r}: {out}"
        return out


def run_cni(command: str, config: Mapping[str, Any] | str | bytes | None,
            env: Mapping[str, str | None] | None = None, *,
            argv: Sequence[str] | None = None, ipam: bool = False,
            timeout: float = 90.0) -> CniResult:
    """Run the plugin with ``CNI_COMMAND=command``, ``env`` (the other ``CNI_*``
    variables; a value of None removes a default) and ``config`` on stdin (an object is
    encoded as JSON; a string or bytes is sent as it is, for malformed input). ``ipam``:
    run it as ``podnet-ipam`` (the role another plugin executes).

    Defaults, as a runtime sets them: ``CNI_PATH`` and, for ADD, DEL and CHECK,
    ``CNI_IFNAME=eth0``; nothing else of the caller's environment but ``PATH``."""
    full: dict[str, str | None] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                   "CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin"}
    if command in ("ADD", "DEL", "CHECK"):
        full["CNI_IFNAME"] = "eth0"
    full.update(env or {})
    clean = {k: v for k, v in full.items() if v is not None}
    if config is None:
        data = b""
    elif isinstance(config, bytes):
        data = config
    elif isinstance(config, str):
        data = config.encode("utf-8")
    else:
        data = json.dumps(config).encode("utf-8")
    done = subprocess.run(list(argv or plugin_argv(ipam)), input=data, env=clean,
                          capture_output=True, timeout=timeout, check=False)
    return CniResult(done.returncode, done.stdout.decode("utf-8", "replace"),
                     done.stderr.decode("utf-8", "replace"))


def pod_args(namespace: str = "default", name: str = "pod-a", uid: str | None = "uid-a",
             infra: str | None = None) -> str:
    """A ``CNI_ARGS`` value as the kubelet's runtimes send it."""
    pairs = ["IgnoreUnknown=1", f"K8S_POD_NAMESPACE={namespace}", f"K8S_POD_NAME={name}"]
    if infra:
        pairs.append(f"K8S_POD_INFRA_CONTAINER_ID={infra}")
    if uid:
        pairs.append(f"K8S_POD_UID={uid}")
    return ";".join(pairs)


def add_as_a_runtime(config: Mapping[str, Any], env: Mapping[str, str], tries: int = 60,
                     pause: float = 0.5) -> tuple[CniResult, list[int | None]]:
    """ADD as a container runtime does: after error 11 (try again later), the same ADD
    again (same container id), ``tries`` times at most, ``pause`` seconds apart.

    :return: the last result, and the error codes of the attempts before it."""
    seen: list[int | None] = []
    done = run_cni("ADD", config, env)
    for _ in range(tries - 1):
        if done.ok or done.error_code != 11:
            break
        seen.append(done.error_code)
        time.sleep(pause)
        done = run_cni("ADD", config, env)
    return done, seen


# --- the agent's side of the plugin's wire format, for the plugin's own tests ------------


@attrs.frozen
class ExecRequest:
    """One request of the plugin, as the agent reads it (``POST /v1/cni/exec``)."""

    method: str
    target: str
    #: (name, raw value) of every header, in order
    headers: tuple[tuple[str, str], ...]
    #: ``CNI-Program``, decoded
    program: str
    #: every ``CNI-Env`` header, decoded, in order
    env: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)


def _decode(value: str) -> str:
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(value).decode("utf-8", "surrogateescape")


def read_exec_request(stream: Any) -> ExecRequest:
    """Parse one request of the plugin from a binary stream (a socket's ``makefile``)."""
    method, target, _ = stream.readline(65537).decode("latin-1").split(" ", 2)
    headers: list[tuple[str, str]] = []
    while True:
        line = stream.readline(65537).decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
    body = stream.read(length) if length else b""
    env = []
    for name, value in headers:
        if name.lower() == "cni-env":
            key, _, val = value.partition("=")
            env.append((_decode(key), _decode(val)))
    program = next((v for k, v in headers if k.lower() == "cni-program"), "")
    return ExecRequest(method, target, tuple(headers), _decode(program), tuple(env), body)


class ExecStandIn:
    """A stand-in for the agent on a unix socket, speaking the plugin's wire format and
    nothing else: it records each request and answers ``respond(request)`` (exit code,
    body) as HTTP 200 with ``CNI-Exit-Code``. It holds no CNI rule (those are the agent's,
    ``podnet.node.cniexec``); it tests the plugin's carrying of the command."""

    def __init__(self, path: str) -> None:
        import socketserver
        import threading

        self.path = path
        self.requests: list[ExecRequest] = []
        self.respond: Any = lambda request: (0, b"")
        stand_in = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = read_exec_request(self.rfile)
                stand_in.requests.append(request)
                code, body = stand_in.respond(request)
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"CNI-Exit-Code: %d\r\nContent-Length: %d\r\n"
                                 b"Connection: close\r\n\r\n%s" % (code, len(body), body))

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self._server = Server(path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> ExecStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
